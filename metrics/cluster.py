"""What a proxy knows of its cluster: topic names by id and each partition's leader, learned
from the Metadata responses it relays or asks for itself, and from what produces and follower
fetches show; and whether it should ask its broker now.

Pure, like the latency model that owns one: no clocks, sockets or Prometheus. Newer clients and
followers name topics by id (Fetch v13+, Produce v13+); the model keys partitions by name, so an
id met without a name is reported (``wants_topics``) and the proxy asks its broker for every
topic (Metadata v12). A consumer fetch for a partition this broker does not lead is served by a
follower (KIP-392), which changes how its data is dated; a partition met without a known
leader is asked about the same way.
"""

from __future__ import annotations

from typing import Final

from ..protocol.sessions import TopicKey

MAX_PARTITIONS: Final = 100_000  # bounds every per-partition map of the model and of this view


class ClusterView:
    def __init__(self) -> None:
        self.topic_names: dict[TopicKey, str] = {}
        # ids met without a name (the proxy then asks its broker for every topic's id), and
        # ids still nameless after that: not asked about again
        self.unnamed: set[TopicKey] = set()
        self.nameless: set[TopicKey] = set()
        # each partition's leader (Metadata, and what produces and follower fetches show); a
        # consumer fetch met at a broker for a partition of unknown leader wants them asked for
        self.leaders: dict[tuple[str, int], int] = {}
        self.leaders_wanted = False
        # partitions met without a known leader since the last ask, and those the answer did not
        # name either (a topic gone): not asked about again, as nameless ids are not
        self._unled: set[tuple[str, int]] = set()
        self._leaderless: set[tuple[str, int]] = set()

    def topic(self, key: TopicKey) -> str:
        """A topic's name; an id not yet named stands for itself (and is asked about)."""
        if isinstance(key, str):
            return key
        name = self.topic_names.get(key)
        if name is not None:
            return name
        if key not in self.nameless and len(self.unnamed) < MAX_PARTITIONS:
            self.unnamed.add(key)
        return str(key)

    def learn_topic_ids(self, topics: tuple[tuple[str, TopicKey], ...], everything: bool = False) -> None:
        """Names of topic ids, from a Metadata response; ``everything``: the answer named every
        topic the broker has, so an id it left out is not asked about again, and the names of
        topics deleted since go (topics come and go all day: the map holds what exists)."""
        if everything:
            self.topic_names = {}
        elif len(self.topic_names) + len(topics) > MAX_PARTITIONS:
            self.topic_names.clear()  # a bound even without full answers: names are asked for again
        for name, tid in topics:
            self.topic_names[tid] = name
            self.unnamed.discard(tid)
            self.nameless.discard(tid)
        if everything:
            if len(self.nameless) + len(self.unnamed) <= MAX_PARTITIONS:
                self.nameless |= self.unnamed
            self.unnamed.clear()

    @property
    def wants_topics(self) -> bool:
        """A topic id without a name, or a partition without a known leader, was met and never
        asked about: the proxy should ask its broker for every topic (Metadata v12) now."""
        return bool(self.unnamed) or self.leaders_wanted

    def learn_leaders(self, leaders: tuple[tuple[str, int, int], ...], everything: bool = False) -> None:
        """Partition leaders from a Metadata response; ``everything``: every topic's (the
        leaders of partitions it left out, of topics deleted since, go)."""
        if everything or len(self.leaders) + len(leaders) > MAX_PARTITIONS:
            self.leaders = {}
        for topic, partition, leader in leaders:
            self.leaders[(topic, partition)] = leader
            self._leaderless.discard((topic, partition))
        if everything:
            if len(self._leaderless) + len(self._unled) > MAX_PARTITIONS:
                self._leaderless.clear()
            self._leaderless |= {k for k in self._unled if k not in self.leaders}
            self._unled.clear()
            self.leaders_wanted = False

    def leader_wanted(self, topic: str, partition: int) -> bool:
        """No leader is known for the partition and the broker was not asked about it in vain:
        it is wanted (asked for at the proxy's next ask, as ``led_elsewhere`` marks it)."""
        key = (topic, partition)
        if key in self.leaders or key in self._leaderless:
            return False
        if len(self._unled) < MAX_PARTITIONS:
            self._unled.add(key)
            self.leaders_wanted = True
        return True

    def unnamed_id(self, key: TopicKey) -> bool:
        """A topic id met without a name, asked about (or to be) and not in vain yet."""
        return not isinstance(key, str) and key in self.unnamed

    def led_elsewhere(self, topic: str, partition: int, broker_node: int) -> bool:
        """This broker is known not to lead the partition: it serves the fetch as a follower."""
        if broker_node < 0:
            return False
        leader = self.leaders.get((topic, partition))
        if leader is None:
            self.leader_wanted(topic, partition)  # asked about, unless it was in vain
            return False
        return leader >= 0 and leader != broker_node
