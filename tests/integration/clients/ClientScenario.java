// The Java client's scenario through the proxy (run as a single source file by `java`, with
// Kafka's cached jars on the class path): the admin client creates a topic of 3 partitions,
// lists topics and describes the cluster; the producer (acks=all) writes 5 records; a consumer
// of the group protocol given (classic, or KIP-848's consumer) reads them in a group and
// commits. One JSON line on stdout says what happened; the test compares it with what it sent.
//
// usage: ClientScenario <bootstrap> <topic> <group> <classic|consumer> <replication factor>
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientScenario {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], protocol = args[3];
        short rf = Short.parseShort(args[4]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("client.id", "java-" + protocol);

        boolean listed;
        int partitions;
        List<Integer> nodeIds;
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, rf))).all().get();
            listed = admin.listTopics().names().get().contains(topic);
            for (int i = 0; i < 50 && !listed; i++) {  // a new topic reaches every broker's metadata soon after
                Thread.sleep(200);
                listed = admin.listTopics().names().get().contains(topic);
            }
            partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            nodeIds = admin.describeCluster().nodes().get().stream().map(n -> n.id()).sorted()
                .collect(Collectors.toList());
        }

        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("acks", "all");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i)).get();
            }
        }

        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("group.id", group);
        cp.put("group.protocol", protocol);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> got = new TreeSet<>();
        long committed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;  // a bound, not a goal
            while (got.size() < 5 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r.key() + ":" + r.value());
                }
            }
            consumer.commitSync();
            Set<TopicPartition> tps = new TreeSet<>((a, b) -> a.partition() - b.partition());
            for (int p = 0; p < 3; p++) tps.add(new TopicPartition(topic, p));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(tps).entrySet()) {
                if (e.getValue() != null) committed += e.getValue().offset();
            }
        }
        List<String> quoted = new ArrayList<>();
        for (String s : got) quoted.add("\"" + s + "\"");
        System.out.println("{\"consumed\": [" + String.join(", ", quoted) + "], \"committed\": " + committed
            + ", \"topic_listed\": " + listed + ", \"partitions\": " + partitions + ", \"node_ids\": " + nodeIds + "}");
    }
}
