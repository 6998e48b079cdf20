//! The check of a held answer for brokers named (KIP-951), on Produce v10 answers made by hand:
//! no `NodeEndpoints` (or an empty one) goes on, one goes to Python, and so does anything the
//! walk cannot follow.

use super::*;

/// A Produce v10 answer's body after its correlation id: one topic, one partition, and the
/// top-level tags `tags` (each `(number, value)`).
fn produce_v10(tags: &[(u8, &[u8])]) -> Vec<u8> {
    let mut b = vec![0]; // the header's tags
    b.push(2); // Responses: one
    b.extend_from_slice(&[2, b't']); // Name "t"
    b.push(2); // PartitionResponses: one
    b.extend_from_slice(&0i32.to_be_bytes()); // Index
    b.extend_from_slice(&6i16.to_be_bytes()); // ErrorCode: NOT_LEADER_OR_FOLLOWER
    b.extend_from_slice(&[0; 24]); // BaseOffset, LogAppendTimeMs, LogStartOffset
    b.push(1); // RecordErrors: none
    b.push(0); // ErrorMessage: null
    b.push(0); // the partition's tags
    b.push(0); // the topic's tags
    b.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
    b.push(tags.len() as u8);
    for (number, value) in tags {
        b.extend_from_slice(&[*number, value.len() as u8]);
        b.extend_from_slice(value);
    }
    b
}

/// NodeEndpoints of one broker: node 3 at "h":9092, no rack.
const ONE_ENDPOINT: &[u8] = &[2, 0, 0, 0, 3, 2, b'h', 0, 0, 0x23, 0x84, 0, 0];

#[test]
fn an_answer_without_node_endpoints_goes_on_and_one_with_them_goes_to_python() {
    let produce = &crate::layout::PRODUCE_ANSWER;
    assert!(!names_brokers(produce, 10, &produce_v10(&[])));
    assert!(!names_brokers(produce, 10, &produce_v10(&[(5, b"xy")])), "another tag is not a broker");
    assert!(!names_brokers(produce, 10, &produce_v10(&[(0, &[1])])), "an empty array names none");
    assert!(!names_brokers(produce, 10, &produce_v10(&[(0, &[0])])), "nor does a null one");
    assert!(names_brokers(produce, 10, &produce_v10(&[(0, ONE_ENDPOINT)])));
    assert!(names_brokers(produce, 10, &produce_v10(&[(5, b"xy"), (0, ONE_ENDPOINT)])));
    assert!(!names_brokers(produce, 9, &produce_v10(&[(0, ONE_ENDPOINT)])), "no such field before v10");
}

#[test]
fn an_answer_the_walk_cannot_follow_goes_to_python() {
    let produce = &crate::layout::PRODUCE_ANSWER;
    let whole = produce_v10(&[]);
    for cut in 0..whole.len() {
        assert!(names_brokers(produce, 10, &whole[..cut]), "cut at {cut}");
    }
    let mut hostile = whole.clone();
    hostile[1] = 0x7f; // 126 topics claimed in a few bytes
    assert!(names_brokers(produce, 10, &hostile));
    let mut tags = whole;
    *tags.last_mut().unwrap() = 0x7f; // 127 top-level tags claimed at the end
    assert!(names_brokers(produce, 10, &tags));
}
