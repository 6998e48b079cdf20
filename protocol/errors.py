"""Errors of the codec. Broker error codes are data (see ``codes.py``), never raised."""


class ProtocolError(Exception):
    """Bytes break the Kafka wire format: observation stops, forwarding continues."""


class FramingError(ProtocolError):
    """Frame boundaries lost (bad or oversized length, a response matching no request)."""


class DecodeError(ProtocolError):
    """A frame's body does not follow the spec of its api key and version."""


class SpecError(Exception):
    """A bundled JSON message spec could not be understood (a packaging bug, not input)."""
