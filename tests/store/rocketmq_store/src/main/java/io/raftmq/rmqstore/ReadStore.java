package io.raftmq.rmqstore;

import java.io.File;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * Opens a store directory with RocketMQ 4.9.8's own DefaultMessageStore (load, recover, reput: consume queues and
 * index it finds missing are rebuilt from the commit log, as a RocketMQ broker would) and pulls every queue under
 * consumequeue/ from its minimum offset to its maximum with getMessage, as a RocketMQ consumer's pulls do.
 *
 * Arguments: STORE_DIR COMMITLOG_SEGMENT_BYTES CONSUMEQUEUE_FILE_BYTES INDEX_SLOTS INDEX_ENTRIES [TOPIC/QUEUE ...]
 * (queues to read besides those found on disk). Each queue is pulled twice: in batches of 32 ("M" lines) and one
 * message per pull ("S" lines). Prints "Q topic queueId min max" per queue, "PM"/"PS topic queueId offset status
 * nextBeginOffset messageCount" per pull and "M"/"S topic queueId pulledAtOffset recordQueueOffset physicalOffset
 * uniqKey" per message (the record's own topic and QUEUEOFFSET, as stored).
 */
public final class ReadStore {
    public static void main(String[] args) {
        int code = 0;
        try {
            read(args);
        } catch (Throwable t) {
            t.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.exit(code);  // the stats manager's scheduler threads are not daemons
    }

    private static void read(String[] args) throws Exception {
        String root = args[0];
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setStorePathRootDir(root);
        cfg.setStorePathCommitLog(root + File.separator + "commitlog");
        cfg.setMappedFileSizeCommitLog(Integer.parseInt(args[1]));
        cfg.setMappedFileSizeConsumeQueue(Integer.parseInt(args[2]));
        cfg.setMaxHashSlotNum(Integer.parseInt(args[3]));
        cfg.setMaxIndexNum(Integer.parseInt(args[4]));
        BrokerConfig broker = new BrokerConfig();
        DefaultMessageStore store = new DefaultMessageStore(cfg, new BrokerStatsManager("raftmq", true), null, broker);
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed for " + root);
        }
        store.start();
        try {
            long deadline = System.currentTimeMillis() + 120_000;
            while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
            }
            Map<String, Integer> queues = new TreeMap<>();
            File[] topics = new File(root, "consumequeue").listFiles();
            for (File topic : topics == null ? new File[0] : topics) {
                String[] ids = topic.list();
                for (String id : ids == null ? new String[0] : ids) {
                    queues.put(topic.getName() + "/" + id, 0);
                }
            }
            for (String extra : Arrays.copyOfRange(args, 5, args.length)) {
                queues.put(extra, 0);
            }
            for (String key : queues.keySet()) {
                String topic = key.substring(0, key.lastIndexOf('/'));
                int queueId = Integer.parseInt(key.substring(key.lastIndexOf('/') + 1));
                readQueue(store, topic, queueId);
            }
        } finally {
            store.shutdown();
        }
    }

    private static void readQueue(DefaultMessageStore store, String topic, int queueId) {
        long min = store.getMinOffsetInQueue(topic, queueId);
        long max = store.getMaxOffsetInQueue(topic, queueId);
        System.out.println("Q " + topic + " " + queueId + " " + min + " " + max);
        pull(store, topic, queueId, min, max, 32, "M");  // as a consumer pulls: batches
        pull(store, topic, queueId, min, max, 1, "S");  // one at a time: which message each queue offset holds
    }

    private static void pull(DefaultMessageStore store, String topic, int queueId, long min, long max, int batch,
                             String tag) {
        long offset = min;
        while (offset < max) {
            GetMessageResult r = store.getMessage("reader", topic, queueId, offset, batch, null);
            try {
                System.out.println("P" + tag + " " + topic + " " + queueId + " " + offset + " " + r.getStatus() + " "
                        + r.getNextBeginOffset() + " " + r.getMessageCount());
                for (ByteBuffer buf : r.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(buf, true, false);
                    String uniq = m.getProperty("UNIQ_KEY");
                    System.out.println(tag + " " + m.getTopic() + " " + queueId + " " + offset + " "
                            + m.getQueueOffset() + " " + m.getCommitLogOffset() + " " + (uniq == null ? "-" : uniq));
                }
                if (r.getNextBeginOffset() <= offset) {
                    break;
                }
                offset = r.getNextBeginOffset();
            } finally {
                r.release();
            }
        }
    }
}
