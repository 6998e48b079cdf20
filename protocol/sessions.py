"""Fetch sessions (KIP-227) mirrored per broker, so an incremental fetch, which lists only the
partitions that changed, is known with its whole partition set and fetch offsets.

Rules (FetchRequest.json, KIP-227): SessionId 0 with SessionEpoch 0 asks for a new session
(the response carries its id); epoch -1 is a sessionless full fetch (or closes SessionId);
a positive epoch is an incremental fetch on SessionId: listed partitions are added or
updated, ForgottenTopicsData removed, and the next epoch is this one plus one (after
2^31 - 1 it wraps to 1). A session error in the response (``FETCH_SESSION_ID_NOT_FOUND``,
``INVALID_FETCH_SESSION_EPOCH``, a topic-id error) drops the mirror; the client starts over
with a full fetch, which the mirror follows.

A session belongs to the broker, not to the connection: a client whose connection closes (an
idle timeout, a proxy or broker restart) goes on with the same session on a new one. So one
``FetchSessions`` serves every connection to a broker (``KafkaConnection(sessions=...)``),
bounded like the broker's own cache, least recently used first out.

The mirror counts what it met (``counts``, read by the metrics layer on scrape): sessions
created, incremental fetches on a mirrored session, incremental fetches on a session it never
saw start (only their listed partitions are known), fetches out of step (an epoch other than
the one due), session errors, and sessions closed or evicted from the mirror.
"""

from __future__ import annotations

import uuid as _uuid
from typing import Final

from .fetch import FetchRequestInfo, FetchResponseInfo

TopicKey = str | _uuid.UUID
Covered = tuple[tuple[TopicKey, int, int], ...]  # (topic name or id, partition, fetch offset)

FINAL_EPOCH: Final = -1
INITIAL_EPOCH: Final = 0
MAX_EPOCH: Final = 2**31 - 1
MAX_SESSIONS: Final = 4096  # a broker keeps 1000 by default (max.incremental.fetch.session.cache.slots)
COUNTS: Final = ("created", "incremental", "unknown", "out_of_step", "errors", "closed", "dropped")


def _key(topic: str | None, topic_id: _uuid.UUID | None) -> TopicKey:
    return topic_id if topic_id is not None else (topic or "")


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class _Session:
    __slots__ = ("next_epoch", "partitions")

    def __init__(self, partitions: dict[tuple[TopicKey, int], int]) -> None:
        self.partitions = partitions
        self.next_epoch = 1


class FetchSessions:
    __slots__ = ("_limit", "_sessions", "closed", "created", "dropped", "errors", "incremental", "out_of_step",
                 "unknown")

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        self._sessions: dict[int, _Session] = {}
        self._limit = limit
        self.created = self.incremental = self.unknown = self.out_of_step = 0
        self.errors = self.closed = self.dropped = 0

    def covered(self, req: FetchRequestInfo) -> Covered:
        """The partitions (and offsets) this fetch really asks for. A ShareFetch is in no fetch
        session and names no offset (the model reads what it acquired from its answer): none."""
        if req.share:
            return ()
        listed = {(_key(p.topic, p.topic_id), p.partition): p.fetch_offset for p in req.partitions}
        if req.session_id == 0 or req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            current = listed
        else:
            session = self._sessions.pop(req.session_id, None)
            if session is None:
                self.unknown += 1
                current = listed  # a session we did not see start: only what is listed is known
            else:
                self._sessions[req.session_id] = session  # most recently used last
                self.incremental += 1
                if req.session_epoch != session.next_epoch:
                    self.out_of_step += 1
                session.next_epoch = next_epoch(req.session_epoch)
                session.partitions.update(listed)
                for topic, topic_id, part in req.forgotten:
                    session.partitions.pop((_key(topic, topic_id), part), None)
                current = session.partitions
        return tuple((t, p, off) for (t, p), off in current.items())

    def on_response(self, req: FetchRequestInfo, resp: FetchResponseInfo, covered: Covered) -> None:
        if req.share:
            return
        if resp.error_code != 0:
            if req.session_id != 0:
                self.errors += 1
                self._sessions.pop(req.session_id, None)
        elif req.session_epoch == INITIAL_EPOCH and resp.session_id != 0:
            if req.session_id != 0 and self._sessions.pop(req.session_id, None) is not None:
                self.closed += 1  # SessionId n, epoch 0: close n and open a new one
            if len(self._sessions) >= self._limit:
                self._sessions.pop(next(iter(self._sessions)))
                self.dropped += 1
            self._sessions[resp.session_id] = _Session({(t, p): off for t, p, off in covered})
            self.created += 1
        elif (req.session_epoch == FINAL_EPOCH and req.session_id != 0
              and self._sessions.pop(req.session_id, None) is not None):
            self.closed += 1

    def counts(self) -> dict[str, int]:
        return {"created": self.created, "incremental": self.incremental, "unknown": self.unknown,
                "out_of_step": self.out_of_step, "errors": self.errors, "closed": self.closed, "dropped": self.dropped}

    def __len__(self) -> int:
        return len(self._sessions)
