"""SASL on an Apache Kafka node for the tests: its listener SASL_PLAINTEXT with SCRAM-SHA-512
(users made at format time) and PLAIN, re-authentication forced every ``reauth_ms`` (KIP-368),
and a confluent-kafka client's settings for SASL_SSL to a TLS sidecar in front of it (the sidecar
ends TLS; the SASL exchange passes through it to the broker)."""

from __future__ import annotations

from testkit.certs import Certs

ADMIN = ("fetchlat-admin", "admin-Secret-5512")  # the broker's own login (inter-broker)
USER = ("alice-u5er", "pw-Secret-7731")  # a client's, known to both mechanisms
MECHANISMS = ("SCRAM-SHA-512", "PLAIN")


def broker_settings(reauth_ms: int) -> dict[str, str]:
    """A node's settings: its BROKER listener speaks SASL_PLAINTEXT (the controller's stays plaintext)."""
    (admin, admin_pw), (user, user_pw) = ADMIN, USER
    scram = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{admin}" '
             f'password="{admin_pw}";')
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{admin}" '
             f'password="{admin_pw}" user_{admin}="{admin_pw}" user_{user}="{user_pw}";')
    return {
        "listener.security.protocol.map": "BROKER:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.scram-sha-512.sasl.jaas.config": scram,
        "listener.name.broker.plain.sasl.jaas.config": plain,
        "connections.max.reauth.ms": str(reauth_ms),
    }


def format_args() -> list[str]:
    """StorageTool format's: the SCRAM credentials of the client user and the broker's own."""
    return [arg for name, pw in (ADMIN, USER)
            for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={pw}]")]


def client_conf(certs: Certs, mechanism: str = "SCRAM-SHA-512") -> dict[str, object]:
    """confluent-kafka's settings for SASL_SSL to a TLS sidecar whose certificate ``certs`` signed."""
    user, pw = USER
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca), "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": pw}
