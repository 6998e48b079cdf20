// A share-group consumer (KIP-932: Kafka's KafkaShareConsumer) through the proxy, run as a
// single source file by `java` with Kafka's cached jars on the class path: it subscribes its
// share group to a topic, reads until it has the number of records asked for (or the bound
// runs out), acknowledging each one, and prints one JSON line: the records read.
// Acknowledgement mode explicit (the default here: each record accepted, then commitSync sends
// a ShareAcknowledge) or implicit (the acknowledgements ride on the next ShareFetch).
//
// usage: ShareConsumer <bootstrap> <topic> <group> <records> <seconds> [explicit|implicit] [client id]
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int want = Integer.parseInt(args[3]);
        long seconds = Long.parseLong(args[4]);
        boolean explicit = args.length < 6 || args[5].equals("explicit");
        String clientId = args.length > 6 ? args[6] : "share-consumer";
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        cp.put("client.id", clientId);
        cp.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> got = new TreeSet<>();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + seconds * 1000;  // a bound, not a goal
            while (got.size() < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r.value());
                    if (explicit) consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                if (explicit) consumer.commitSync();
            }
        }
        System.out.println("{\"records\": " + got.size() + "}");
    }
}
