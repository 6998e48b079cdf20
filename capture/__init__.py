"""True fetch latency from packet captures: ``fetchlat pcap`` (docs/capture.md).

The road of one packet: ``source.py`` (the capture file or live pipe: timestamp and bytes) ->
``packets.py`` (link, IP and TCP headers: which conversation, which direction, what payload)
-> ``reassembly.py`` (one direction's bytes in order, holes counted) -> ``flows.py`` (a TCP
conversation with a broker port: where Kafka frames begin, fed to the proxy's own
``Conversation`` with the packets' timestamps) -> the observation layer and trace writer the
proxy uses. ``run.py`` is the command.
"""
