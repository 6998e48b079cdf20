// A Java consumer that runs for a while in a group, as the long-running cases need it (run as a
// single source file by `java`, with Kafka's cached jars on the class path): it subscribes,
// polls for the seconds given, and obeys lines on stdin: "pause" (pause every assigned
// partition: no more fetches; it answers "paused" on stdout once the fetch in flight is back)
// and "resume". Any further argument is a consumer setting (key=value: client.rack,
// fetch.max.wait.ms, isolation.level, ...). On the way out it prints one JSON line: records
// consumed, assignment changes, the partitions it held at some point.
//
// usage: LongConsumer <bootstrap> <topic> <group> <client.id> <seconds> [key=value ...]
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class LongConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], clientId = args[3];
        long seconds = Long.parseLong(args[4]);
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        cp.put("client.id", clientId);
        cp.put("auto.offset.reset", "latest");
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        for (int i = 5; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            cp.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        ConcurrentLinkedQueue<String> commands = new ConcurrentLinkedQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                for (String line; (line = in.readLine()) != null; ) commands.add(line.trim());
            } catch (Exception e) {
                // stdin closed: no more commands
            }
        });
        reader.setDaemon(true);
        reader.start();

        long records = 0;
        int[] changes = {0};
        Set<Integer> held = new TreeSet<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) { }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    changes[0]++;
                    for (TopicPartition tp : parts) held.add(tp.partition());
                }
            });
            long deadline = System.currentTimeMillis() + seconds * 1000;
            boolean paused = false;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> got = consumer.poll(Duration.ofMillis(100));
                records += got.count();
                if (paused) {
                    System.out.println("paused");  // poll returned: the fetch in flight is back
                    System.out.flush();
                    paused = false;
                }
                for (String c; (c = commands.poll()) != null; ) {
                    if (c.equals("pause")) {
                        consumer.pause(consumer.assignment());
                        paused = true;
                    } else if (c.equals("resume")) {
                        consumer.resume(consumer.paused());
                    }
                }
            }
        }
        System.out.println("{\"records\": " + records + ", \"assignments\": " + changes[0]
            + ", \"partitions_held\": " + held + "}");
    }
}
