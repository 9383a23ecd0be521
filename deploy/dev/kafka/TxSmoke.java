// Smoke test for the dev broker: topic creation with partitions, a
// transactional producer (commit + abort), offsets committed inside a
// transaction, and a read_committed consumer that must see exactly the
// committed records. Run by `deploy/dev/kafka.sh smoke` as a single-file
// Java program (java -cp 'lib/*' TxSmoke.java BOOTSTRAP).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TxSmoke {
    public static void main(String[] args) throws Exception {
        String bs = args[0];
        String topic = "hookline-smoke-" + UUID.randomUUID();
        long t0 = System.nanoTime();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            int parts = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            if (parts != 3) throw new AssertionError("partitions=" + parts);
        }
        Map<String, Object> pc = new HashMap<>();
        pc.put("bootstrap.servers", bs);
        pc.put("transactional.id", "smoke-" + UUID.randomUUID());
        pc.put("key.serializer", StringSerializer.class.getName());
        pc.put("value.serializer", StringSerializer.class.getName());
        Map<String, Object> gc = new HashMap<>();
        gc.put("bootstrap.servers", bs);
        gc.put("group.id", "smoke-group-" + UUID.randomUUID());
        gc.put("key.deserializer", StringDeserializer.class.getName());
        gc.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pc);
             KafkaConsumer<String, String> g = new KafkaConsumer<>(gc)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 3; i++) p.send(new ProducerRecord<>(topic, "k" + i, "committed-" + i));
            p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(0)),
                    g.groupMetadata());
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 2; i++) p.send(new ProducerRecord<>(topic, "k" + i, "aborted-" + i));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, "k9", "committed-9"));
            p.commitTransaction();
        }
        Map<String, Object> cc = new HashMap<>();
        cc.put("bootstrap.servers", bs);
        cc.put("group.id", "smoke-reader-" + UUID.randomUUID());
        cc.put("auto.offset.reset", "earliest");
        cc.put("isolation.level", "read_committed");
        cc.put("key.deserializer", StringDeserializer.class.getName());
        cc.put("value.deserializer", StringDeserializer.class.getName());
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cc)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < 4 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
            }
            // Give an aborted record a chance to (wrongly) show up.
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) got.add(r.value());
        }
        Collections.sort(got);
        List<String> want = List.of("committed-0", "committed-1", "committed-2", "committed-9");
        if (!got.equals(want)) throw new AssertionError("read_committed saw " + got + ", want " + want);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
            admin.deleteTopics(List.of(topic)).all().get();
        }
        System.err.printf("smoke ok: %s, 3 partitions, commit/abort/commit, read_committed saw %d records (%.1f s)%n",
                topic, got.size(), (System.nanoTime() - t0) / 1e9);
    }
}
