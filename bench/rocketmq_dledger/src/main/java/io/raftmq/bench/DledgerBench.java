package io.raftmq.bench;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The RocketMQ side of bench/peer_bench.py.
 *
 * <pre>
 *   create-topic NAMESRV TOPIC QUEUES TIMEOUT_S   create TOPIC on the DLedger group's master once it has one
 *   produce NAMESRV TOPIC THREADS BATCH SIZE WARMUP_S SECONDS
 *       THREADS closed-loop producers sharing one DefaultMQProducer, each sending BATCH messages of SIZE bytes
 *       per request and waiting for the broker's answer; prints "measuring" after the warm-up, then one line:
 *       result messages elapsed_s p50_s p99_s client_cpu_s failed_requests
 * </pre>
 */
public final class DledgerBench {
    private DledgerBench() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 5 && args[0].equals("create-topic")) {
            createTopic(args[1], args[2], Integer.parseInt(args[3]), Double.parseDouble(args[4]));
        } else if (args.length == 8 && args[0].equals("produce")) {
            produce(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                    Integer.parseInt(args[5]), Double.parseDouble(args[6]), Double.parseDouble(args[7]));
        } else {
            System.err.println("usage: create-topic NAMESRV TOPIC QUEUES TIMEOUT_S | "
                    + "produce NAMESRV TOPIC THREADS BATCH SIZE WARMUP_S SECONDS");
            System.exit(2);
        }
        System.exit(0);
    }

    private static void createTopic(String namesrv, String topic, int queues, double timeoutS) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("bench-admin-" + ProcessHandle.current().pid());
        admin.start();
        long deadline = System.nanoTime() + (long) (timeoutS * 1e9);
        Exception last = null;
        try {
            while (System.nanoTime() < deadline) {
                try {
                    String master = master(admin.examineBrokerClusterInfo());
                    if (master != null) {
                        TopicConfig config = new TopicConfig(topic, queues, queues,
                                PermName.PERM_READ | PermName.PERM_WRITE);
                        admin.createAndUpdateTopicConfig(master, config);
                        TopicRouteData route = admin.examineTopicRouteInfo(topic);
                        if (route != null && !route.getQueueDatas().isEmpty()) {
                            System.out.println("created " + topic + " on " + master);
                            return;
                        }
                    }
                } catch (Exception e) {
                    last = e;
                }
                Thread.sleep(500);
            }
            throw new IllegalStateException("no DLedger master took topic " + topic + " in time", last);
        } finally {
            admin.shutdown();
        }
    }

    private static String master(ClusterInfo info) {
        for (BrokerData broker : info.getBrokerAddrTable().values()) {
            for (Map.Entry<Long, String> e : broker.getBrokerAddrs().entrySet()) {
                if (e.getKey() == MixAll.MASTER_ID) {
                    return e.getValue();
                }
            }
        }
        return null;
    }

    private static void produce(String namesrv, String topic, int threads, int batch, int size, double warmupS,
                                double seconds) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("raftmq_bench_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(30_000);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);  // 1 KiB bodies are sent as they are anyway
        producer.start();
        byte[] body = new byte[size];
        ThreadLocalRandom.current().nextBytes(body);
        producer.send(new Message(topic, body));  // route lookup and connection, as the raftmq client's first send

        long warmupEnd = System.nanoTime() + (long) (warmupS * 1e9);
        List<Thread> workers = new ArrayList<>();
        List<List<Long>> latencies = Collections.synchronizedList(new ArrayList<>());
        long[] sent = new long[threads];
        long[] failed = new long[threads];
        long[] window = new long[2];
        Object gate = new Object();
        boolean[] measuring = {false};
        for (int t = 0; t < threads; t++) {
            final int me = t;
            workers.add(new Thread(() -> {
                List<Long> mine = new ArrayList<>();
                List<Message> msgs = new ArrayList<>();
                for (int i = 0; i < batch; i++) {
                    msgs.add(new Message(topic, body));
                }
                boolean counting = false;
                while (true) {
                    long t0 = System.nanoTime();
                    if (!counting) {
                        synchronized (gate) {
                            counting = measuring[0];
                        }
                    }
                    if (counting && t0 >= window[1]) {
                        break;
                    }
                    boolean ok;
                    try {
                        SendResult r = batch == 1 ? producer.send(msgs.get(0)) : producer.send(msgs);
                        ok = r.getSendStatus() == SendStatus.SEND_OK;
                    } catch (Exception e) {
                        ok = false;
                    }
                    if (counting) {
                        if (ok) {
                            sent[me] += batch;
                            mine.add(System.nanoTime() - t0);
                        } else {
                            failed[me]++;
                        }
                    }
                }
                latencies.add(mine);
            }));
        }
        for (Thread w : workers) {
            w.start();
        }
        Thread.sleep(Math.max(0, (warmupEnd - System.nanoTime()) / 1_000_000));
        long cpu0 = processCpuNanos();
        synchronized (gate) {
            window[0] = System.nanoTime();
            window[1] = window[0] + (long) (seconds * 1e9);
            measuring[0] = true;
        }
        System.out.println("measuring");
        System.out.flush();
        for (Thread w : workers) {
            w.join();
        }
        double elapsed = (System.nanoTime() - window[0]) / 1e9;
        double cpu = (processCpuNanos() - cpu0) / 1e9;
        producer.shutdown();
        List<Long> all = new ArrayList<>();
        for (List<Long> l : latencies) {
            all.addAll(l);
        }
        Collections.sort(all);
        long total = 0;
        long failures = 0;
        for (int t = 0; t < threads; t++) {
            total += sent[t];
            failures += failed[t];
        }
        System.out.printf("result %d %.6f %.6f %.6f %.6f %d%n", total, elapsed, pct(all, 50), pct(all, 99), cpu, failures);
    }

    private static double pct(List<Long> sorted, double p) {
        if (sorted.isEmpty()) {
            return Double.NaN;
        }
        int i = (int) Math.round(p / 100 * (sorted.size() - 1));
        return sorted.get(Math.min(sorted.size() - 1, i)) / 1e9;
    }

    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }
}
