// KafkaJS's scenario through the proxy: the admin creates a topic of 3 partitions, lists topics
// and describes the cluster; the producer (acks=all) writes 5 records; a consumer reads them in
// a group and commits. One JSON line on stdout says what happened.
//
// usage: node scenario.js <bootstrap> <topic> <group> <replication factor>
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, groupId, rf] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kafkajs", brokers: bootstrap.split(","), logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: Number(rf) }], waitForLeaders: true });
  let listed = false;
  for (let i = 0; i < 50 && !listed; i++) {  // metadata reaches every broker eventually: bounded
    listed = (await admin.listTopics()).includes(topic);
    if (!listed) await new Promise((r) => setTimeout(r, 200));
  }
  const cluster = await admin.describeCluster();
  const meta = await admin.fetchTopicMetadata({ topics: [topic] });

  const producer = kafka.producer();
  await producer.connect();
  for (let i = 0; i < 5; i++) {
    await producer.send({ topic, acks: -1, messages: [{ key: `k${i}`, value: `v${i}`, partition: i % 3 }] });
  }
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      got.push(`${message.key}:${message.value}`);
      await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
    },
  });
  const deadline = Date.now() + 60000;  // a bound, not a goal
  while (got.length < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  await consumer.stop();
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  const committed = offsets[0].partitions.reduce((s, p) => s + Math.max(Number(p.offset), 0), 0);
  await consumer.disconnect();
  await admin.disconnect();
  console.log(JSON.stringify({
    consumed: got.sort(), committed, topic_listed: listed,
    partitions: meta.topics[0].partitions.length, node_ids: cluster.brokers.map((b) => b.nodeId).sort(),
  }));
}

main().catch((e) => { console.error(e); process.exit(1); });
