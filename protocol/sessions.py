"""Fetch sessions (KIP-227) mirrored per connection, so an incremental fetch, which lists only
the partitions that changed, is known with its whole partition set and fetch offsets.

Rules (FetchRequest.json, KIP-227): SessionId 0 with SessionEpoch 0 asks for a new session
(the response carries its id); epoch -1 is a sessionless full fetch (or closes SessionId);
a positive epoch is an incremental fetch on SessionId: listed partitions are added or
updated, ForgottenTopicsData removed. A session error in the response drops the mirror.
"""

from __future__ import annotations

import uuid as _uuid
from typing import Final

from .fetch import FetchRequestInfo, FetchResponseInfo

TopicKey = str | _uuid.UUID
Covered = tuple[tuple[TopicKey, int, int], ...]  # (topic name or id, partition, fetch offset)

FINAL_EPOCH: Final = -1
INITIAL_EPOCH: Final = 0
MAX_SESSIONS_PER_CONNECTION: Final = 16


def _key(topic: str | None, topic_id: _uuid.UUID | None) -> TopicKey:
    return topic_id if topic_id is not None else (topic or "")


class FetchSessions:
    __slots__ = ("_sessions",)

    def __init__(self) -> None:
        self._sessions: dict[int, dict[tuple[TopicKey, int], int]] = {}

    def covered(self, req: FetchRequestInfo) -> Covered:
        """The partitions (and offsets) this fetch really asks for."""
        listed = {(_key(p.topic, p.topic_id), p.partition): p.fetch_offset for p in req.partitions}
        if req.session_id == 0 or req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            current = listed
        else:
            session = self._sessions.get(req.session_id)
            if session is None:
                current = listed  # a session we did not see start: only what is listed is known
            else:
                session.update(listed)
                for topic, topic_id, part in req.forgotten:
                    session.pop((_key(topic, topic_id), part), None)
                current = session
        return tuple((t, p, off) for (t, p), off in current.items())

    def on_response(self, req: FetchRequestInfo, resp: FetchResponseInfo, covered: Covered) -> None:
        if resp.error_code != 0:
            self._sessions.pop(req.session_id, None)
        elif req.session_epoch == INITIAL_EPOCH and resp.session_id != 0:
            if len(self._sessions) >= MAX_SESSIONS_PER_CONNECTION:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[resp.session_id] = {(t, p): off for t, p, off in covered}
        elif req.session_epoch == FINAL_EPOCH and req.session_id != 0:
            self._sessions.pop(req.session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)
