package io.raftmq.rmq5;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The official RocketMQ 5 Java client, driven by tests/rocketmq5/test_java_client.py and bench/rocketmq5_bench.py.
 *
 * <pre>java -cp ... io.raftmq.rmq5.Driver COMMAND key=value...</pre>
 *
 * Common keys: endpoints (h:p;h:p), tls (true|false), ak, sk, topic. Every event is one JSON line on stdout.
 * <ul>
 *   <li>produce: kind=normal|fifo|delay|tx-commit|tx-rollback|tx-orphan, count, prefix, tag, group (fifo),
 *       delay_s (delay), threads (sends in parallel; then only a summary with msgs/s and latencies)</li>
 *   <li>simple: group, expr (tag expression), count, invisible_s, change=BODY (change that message's invisible
 *       time to 2 s instead of acking it once: it comes back with attempt 2), timeout_s, quiet (bench: only the
 *       summary, with msgs/s)</li>
 *   <li>push: group, fail=BODY (answered FAILURE every time), expect (SUCCESS count), fail_times (deliveries of
 *       BODY to wait for), timeout_s</li>
 * </ul>
 */
public final class Driver {
    private static final Object OUT = new Object();

    private Driver() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            a.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(a.get("endpoints"))
            .enableSsl(Boolean.parseBoolean(a.getOrDefault("tls", "false")))
            .setCredentialProvider(new StaticSessionCredentialsProvider(a.getOrDefault("ak", ""),
                a.getOrDefault("sk", "")))
            .setRequestTimeout(Duration.ofSeconds(Long.parseLong(a.getOrDefault("request_timeout_s", "5"))))
            .build();
        switch (args[0]) {
            case "produce" -> produce(provider, config, a);
            case "simple" -> simple(provider, config, a);
            case "push" -> push(provider, config, a);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
        emit(Map.of("op", "done"));
        System.exit(0);
    }

    // ------------------------------------------------------------------ producer
    private static void produce(ClientServiceProvider provider, ClientConfiguration config, Map<String, String> a)
        throws Exception {
        String topic = a.get("topic");
        String kind = a.getOrDefault("kind", "normal");
        int count = Integer.parseInt(a.getOrDefault("count", "1"));
        String prefix = a.getOrDefault("prefix", "m");
        ProducerBuilder builder = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic);
        if (kind.startsWith("tx")) {
            builder.setTransactionChecker(view -> {
                emit(Map.of("op", "check", "body", body(view), "message_id", view.getMessageId().toString()));
                return TransactionResolution.COMMIT;
            });
        }
        Producer started;
        try {
            started = builder.build();
        } catch (Exception e) {  // e.g. no route: the wrong TLS setting, an unreachable or refusing server
            emit(Map.of("op", "start", "ok", false, "error", e.getClass().getSimpleName() + ": " + rootCause(e)));
            return;
        }
        try (Producer producer = started) {
            int threads = Integer.parseInt(a.getOrDefault("threads", "0"));
            if (threads > 0) {
                bench(producer, provider, a, topic, count, threads);
                return;
            }
            for (int i = 0; i < count; i++) {
                String b = prefix + i;
                MessageBuilder mb = provider.newMessageBuilder().setTopic(topic)
                    .setBody(b.getBytes(StandardCharsets.UTF_8)).setKeys("key-" + b).addProperty("n", "" + i);
                if (a.containsKey("tag")) {
                    mb.setTag(a.get("tag"));
                }
                if (kind.equals("fifo")) {
                    mb.setMessageGroup(a.getOrDefault("group", "g"));
                }
                if (kind.equals("delay")) {
                    mb.setDeliveryTimestamp(System.currentTimeMillis() + 1000L * Long.parseLong(a.get("delay_s")));
                }
                Message msg = mb.build();
                Map<String, Object> out = new TreeMap<>(Map.of("op", "send", "body", b));
                try {
                    if (kind.startsWith("tx")) {
                        Transaction tx = producer.beginTransaction();
                        SendReceipt r = producer.send(msg, tx);
                        out.put("message_id", r.getMessageId().toString());
                        if (kind.equals("tx-commit")) {
                            tx.commit();
                        } else if (kind.equals("tx-rollback")) {
                            tx.rollback();
                        }
                    } else {
                        out.put("message_id", producer.send(msg).getMessageId().toString());
                    }
                    out.put("ok", true);
                } catch (Exception e) {
                    out.put("ok", false);
                    out.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                }
                emit(out);
            }
            if (kind.equals("tx-orphan")) {
                sleep(Long.parseLong(a.getOrDefault("wait_s", "10")));  // the server's check arrives meanwhile
            }
        }
    }

    private static void bench(Producer producer, ClientServiceProvider provider, Map<String, String> a,
                              String topic, int count, int threads) throws Exception {
        byte[] payload = new byte[Integer.parseInt(a.getOrDefault("size", "1024"))];
        long seconds = Long.parseLong(a.getOrDefault("seconds", "5"));
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        List<Long> latencies = Collections.synchronizedList(new ArrayList<>());
        int[] failed = new int[1];
        List<Thread> workers = new ArrayList<>();
        long start = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            Thread w = new Thread(() -> {
                while (System.nanoTime() < end) {
                    Message m = provider.newMessageBuilder().setTopic(topic).setBody(payload).build();
                    long t0 = System.nanoTime();
                    try {
                        producer.send(m);
                        latencies.add(System.nanoTime() - t0);
                    } catch (Exception e) {
                        synchronized (failed) {
                            failed[0]++;
                        }
                    }
                }
            });
            w.start();
            workers.add(w);
        }
        for (Thread w : workers) {
            w.join();
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        List<Long> sorted = new ArrayList<>(latencies);
        Collections.sort(sorted);
        emit(Map.of("op", "bench", "sent", sorted.size(), "failed", failed[0], "msgs_s", sorted.size() / elapsed,
            "p50_ms", pct(sorted, 50), "p99_ms", pct(sorted, 99)));
    }

    private static double pct(List<Long> sorted, int p) {
        if (sorted.isEmpty()) {
            return 0;
        }
        return sorted.get(Math.min(sorted.size() - 1, sorted.size() * p / 100)) / 1e6;
    }

    // ------------------------------------------------------------------ consumers
    private static Map<String, FilterExpression> subscription(Map<String, String> a) {
        return Map.of(a.get("topic"), new FilterExpression(a.getOrDefault("expr", "*"), FilterExpressionType.TAG));
    }

    private static void simple(ClientServiceProvider provider, ClientConfiguration config, Map<String, String> a)
        throws Exception {
        int count = Integer.parseInt(a.get("count"));
        Duration invisible = Duration.ofSeconds(Long.parseLong(a.getOrDefault("invisible_s", "15")));
        String change = a.get("change");
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("timeout_s", "60"));
        Set<String> acked = new HashSet<>();
        boolean quiet = Boolean.parseBoolean(a.getOrDefault("quiet", "false"));
        long start = System.nanoTime();
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(a.get("group")).setAwaitDuration(Duration.ofSeconds(3))
            .setSubscriptionExpressions(subscription(a)).build()) {
            while (acked.size() < count && System.currentTimeMillis() < deadline) {
                List<MessageView> got;
                try {
                    got = consumer.receive(16, invisible);
                } catch (Exception e) {
                    emit(Map.of("op", "receive_error", "error", "" + e.getMessage()));
                    sleep(1);
                    continue;
                }
                if (quiet) {  // bench: ack in the receive loop, one summary line at the end
                    for (MessageView v : got) {
                        consumer.ack(v);
                        acked.add(v.getMessageId().toString());
                    }
                    continue;
                }
                for (MessageView v : got) {
                    emit(describe("got", v));
                    String b = body(v);
                    try {
                        if (b.equals(change) && v.getDeliveryAttempt() == 1) {
                            consumer.changeInvisibleDuration(v, Duration.ofSeconds(2));
                            emit(Map.of("op", "changed", "body", b));
                            continue;
                        }
                        consumer.ack(v);
                        acked.add(b);
                    } catch (Exception e) {
                        emit(Map.of("op", "ack_error", "body", b, "error", "" + e.getMessage()));
                    }
                }
            }
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        emit(Map.of("op", "drained", "ok", acked.size() >= count, "acked", acked.size(),
            "msgs_s", quiet ? acked.size() / elapsed : 0.0));
    }

    private static void push(ClientServiceProvider provider, ClientConfiguration config, Map<String, String> a)
        throws Exception {
        String fail = a.getOrDefault("fail", "");
        int expect = Integer.parseInt(a.getOrDefault("expect", "0"));
        int failTimes = Integer.parseInt(a.getOrDefault("fail_times", "0"));
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("timeout_s", "90"));
        Set<String> ok = Collections.synchronizedSet(new HashSet<>());
        int[] failures = new int[1];
        PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(a.get("group")).setSubscriptionExpressions(subscription(a))
            .setMessageListener(v -> {
                boolean bad = body(v).equals(fail);
                Map<String, Object> e = describe("consume", v);
                e.put("result", bad ? "FAILURE" : "SUCCESS");
                emit(e);
                if (bad) {
                    synchronized (failures) {
                        failures[0]++;
                    }
                    return ConsumeResult.FAILURE;
                }
                ok.add(body(v));
                return ConsumeResult.SUCCESS;
            }).build();
        try {
            while (System.currentTimeMillis() < deadline && (ok.size() < expect || failures[0] < failTimes)) {
                sleep(0.2);
            }
        } finally {
            consumer.close();
        }
        emit(Map.of("op", "stopped", "ok", ok.size() >= expect && failures[0] >= failTimes));
    }

    private static String rootCause(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    // ------------------------------------------------------------------ output
    private static String body(MessageView v) {
        ByteBuffer b = v.getBody().duplicate();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    private static Map<String, Object> describe(String op, MessageView v) {
        Map<String, Object> m = new TreeMap<>();
        m.put("op", op);
        m.put("body", body(v));
        m.put("message_id", v.getMessageId().toString());
        m.put("topic", v.getTopic());
        m.put("tag", v.getTag().orElse(""));
        m.put("keys", new ArrayList<>(v.getKeys()));
        m.put("props", new TreeMap<>(v.getProperties()));
        m.put("attempt", v.getDeliveryAttempt());
        m.put("group", v.getMessageGroup().orElse(""));
        m.put("delivery_ts", v.getDeliveryTimestamp().orElse(0L));
        return m;
    }

    private static void sleep(double seconds) {
        try {
            Thread.sleep((long) (seconds * 1000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void emit(Map<String, ?> fields) {
        String line = json(fields);
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static String json(Object o) {
        if (o == null) {
            return "null";
        }
        if (o instanceof String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    default -> {
                        if (c < 0x20) {
                            b.append(String.format("\\u%04x", (int) c));
                        } else {
                            b.append(c);
                        }
                    }
                }
            }
            return b.append('"').toString();
        }
        if (o instanceof Map<?, ?> map) {
            List<String> parts = new ArrayList<>();
            for (Map.Entry<?, ?> e : map.entrySet()) {
                parts.add(json(String.valueOf(e.getKey())) + ":" + json(e.getValue()));
            }
            return "{" + String.join(",", parts) + "}";
        }
        if (o instanceof List<?> list) {
            List<String> parts = new ArrayList<>();
            for (Object x : list) {
                parts.add(json(x));
            }
            return "[" + String.join(",", parts) + "]";
        }
        if (o instanceof Double d) {
            return d.isNaN() || d.isInfinite() ? "null" : d.toString();
        }
        return o.toString();
    }
}
