// Smoke test of the three-broker dev cluster, run by `deploy/dev/kafka.sh
// cluster smoke` as a single-file Java program
// (java -cp 'lib/*' ClusterSmoke.java BOOTSTRAP KAFKA_SH):
//   1. a topic of 3 partitions with replication factor 3 and min ISR 2, every
//      replica in sync;
//   2. a transactional producer commits, aborts, commits (offsets in a
//      transaction too); a read_committed consumer sees exactly the committed
//      records; `kafka.sh cluster coordinator` agrees with the Admin API on
//      the coordinators of the transactional id and of the reader's group;
//   3. `kafka.sh cluster leader` agrees with the Admin API on partition 0's
//      leader, which `kafka.sh cluster kill` then SIGKILLs; an idempotent
//      acks=all producer writes to every partition and succeeds once another
//      replica leads; a read_committed consumer in a fresh group reads every
//      committed record, the new ones too;
//   4. `kafka.sh cluster start` restarts the killed broker, which rejoins
//      every partition's ISR.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class ClusterSmoke {
    static String script;

    // `kafka.sh cluster ARGS`: its stdout, trimmed; its stderr passed through.
    static String cluster(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("bash", script, "cluster"));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String out = new String(p.getInputStream().readAllBytes()).trim();
        int rc = p.waitFor();
        if (rc != 0) throw new AssertionError("kafka.sh cluster " + String.join(" ", args) + " exited " + rc);
        return out;
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void step(long t0, String what) {
        System.err.printf("cluster smoke: %5.1f s  %s%n", (System.nanoTime() - t0) / 1e9, what);
    }

    static List<TopicPartitionInfo> partitions(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions();
    }

    // Until every partition has a leader and `replicas` replicas in sync.
    static void waitInSync(Admin admin, String topic, int replicas, Duration limit) throws Exception {
        long deadline = System.nanoTime() + limit.toNanos();
        List<TopicPartitionInfo> last = List.of();
        while (System.nanoTime() < deadline) {
            last = partitions(admin, topic);
            if (last.stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty()
                    && p.replicas().size() == replicas && p.isr().size() == replicas)) return;
            Thread.sleep(200);
        }
        throw new AssertionError("not every partition of " + topic + " has " + replicas + " replicas in sync: " + last);
    }

    static List<String> readCommitted(String bs, String topic, String group, int want, Admin admin,
                                      String checkCoordinator) throws Exception {
        Map<String, Object> cc = new HashMap<>();
        cc.put("bootstrap.servers", bs);
        cc.put("group.id", group);
        cc.put("auto.offset.reset", "earliest");
        cc.put("isolation.level", "read_committed");
        cc.put("key.deserializer", StringDeserializer.class.getName());
        cc.put("value.deserializer", StringDeserializer.class.getName());
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cc)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (got.size() < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
            }
            // Give an aborted record a chance to (wrongly) show up.
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) got.add(r.value());
            if (checkCoordinator != null) {
                // While the group has its member: the Admin API's coordinator against the script's.
                int viaAdmin = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get()
                        .coordinator().id();
                String viaScript = cluster("coordinator", "group", group);
                check(viaScript.equals(String.valueOf(viaAdmin)),
                        "coordinator of group " + group + ": kafka.sh says " + viaScript + ", Admin " + viaAdmin);
                System.err.printf("cluster smoke: group %s is coordinated by broker %d%n", group, viaAdmin);
            }
        }
        Collections.sort(got);
        return got;
    }

    public static void main(String[] args) throws Exception {
        String bs = args[0];
        script = args[1];
        String topic = "hookline-cluster-smoke-" + UUID.randomUUID();
        long t0 = System.nanoTime();
        List<String> want = new ArrayList<>(List.of("committed-0", "committed-1", "committed-2", "committed-9"));
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
            int brokers = admin.describeCluster().nodes().get().size();
            check(brokers == 3, "the cluster has " + brokers + " brokers, not 3");
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get();
            waitInSync(admin, topic, 3, Duration.ofSeconds(30));
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            String minIsr = admin.describeConfigs(List.of(res)).all().get().get(res).get("min.insync.replicas").value();
            check("2".equals(minIsr), "min.insync.replicas of " + topic + " is " + minIsr + ", not 2");
            step(t0, topic + ": 3 partitions, 3 replicas each, all in sync, min.insync.replicas 2");

            // 2. Transactions.
            String txId = "cluster-smoke-" + UUID.randomUUID();
            Map<String, Object> pc = new HashMap<>();
            pc.put("bootstrap.servers", bs);
            pc.put("transactional.id", txId);
            pc.put("key.serializer", StringSerializer.class.getName());
            pc.put("value.serializer", StringSerializer.class.getName());
            Map<String, Object> gc = new HashMap<>();
            gc.put("bootstrap.servers", bs);
            gc.put("group.id", "cluster-smoke-group-" + UUID.randomUUID());
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
            int txCoordinator = admin.describeTransactions(List.of(txId)).description(txId).get().coordinatorId();
            String txViaScript = cluster("coordinator", "transaction", txId);
            check(txViaScript.equals(String.valueOf(txCoordinator)),
                    "coordinator of " + txId + ": kafka.sh says " + txViaScript + ", Admin " + txCoordinator);
            List<String> got = readCommitted(bs, topic, "cluster-smoke-reader-" + UUID.randomUUID(), 4, admin, "check");
            check(got.equals(want), "read_committed saw " + got + ", want " + want);
            step(t0, "commit/abort/commit: read_committed saw the 4 committed records; transaction coordinated by broker "
                    + txCoordinator);

            // 3. Kill the leader of partition 0, then write with acks=all.
            int leader = partitions(admin, topic).get(0).leader().id();
            String leaderViaScript = cluster("leader", topic, "0");
            check(leaderViaScript.equals(String.valueOf(leader)),
                    "leader of " + topic + "-0: kafka.sh says " + leaderViaScript + ", Admin " + leader);
            cluster("kill", String.valueOf(leader));
            boolean restarted = false;
            try {
                step(t0, "broker " + leader + ", the leader of partition 0, killed (SIGKILL)");
                Map<String, Object> ac = new HashMap<>();
                ac.put("bootstrap.servers", bs);
                ac.put("acks", "all");
                ac.put("enable.idempotence", "true");
                ac.put("delivery.timeout.ms", "90000");
                ac.put("request.timeout.ms", "10000");
                ac.put("key.serializer", StringSerializer.class.getName());
                ac.put("value.serializer", StringSerializer.class.getName());
                List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
                try (KafkaProducer<String, String> p = new KafkaProducer<>(ac)) {
                    for (int part = 0; part < 3; part++) {
                        for (int i = 0; i < 5; i++) {
                            String v = "after-kill-" + part + "-" + i;
                            want.add(v);
                            acks.add(p.send(new ProducerRecord<>(topic, part, "k" + i, v)));
                        }
                    }
                    for (java.util.concurrent.Future<RecordMetadata> a : acks) a.get();
                }
                TopicPartitionInfo p0 = partitions(admin, topic).get(0);
                check(p0.leader() != null && p0.leader().id() != leader,
                        "partition 0 is still led by the killed broker: " + p0);
                check(p0.isr().size() >= 2, "partition 0 has fewer than 2 replicas in sync: " + p0);
                step(t0, "acks=all wrote 15 records to 3 partitions; partition 0 now led by broker "
                        + p0.leader().id() + ", ISR " + p0.isr().stream().map(n -> n.idString()).toList());
                Collections.sort(want);
                got = readCommitted(bs, topic, "cluster-smoke-after-" + UUID.randomUUID(), want.size(), admin, null);
                check(got.equals(want), "after the kill read_committed saw " + got + ", want " + want);
                step(t0, "read_committed saw all " + got.size() + " committed records");

                // 4. The killed broker back, in sync again.
                cluster("start", String.valueOf(leader));
                restarted = true;
                waitInSync(admin, topic, 3, Duration.ofSeconds(90));
                step(t0, "broker " + leader + " restarted; every partition has its 3 replicas in sync again");
            } finally {
                if (!restarted) cluster("start", String.valueOf(leader));
            }
            admin.deleteTopics(List.of(topic)).all().get();
        }
        System.err.printf("cluster smoke ok (%.1f s)%n", (System.nanoTime() - t0) / 1e9);
    }
}
