"""The OSC peer of adapters/osc/tests/python_osc.rs, on python-osc (the real library, as a
TouchOSC-like sender and an OSC receiver).

    osc_peer.py send HOST PORT SCENARIO [BIND_IP]
        types     one message of every type python-osc writes, one with a time tag
                  argument, one with no arguments
        bundles   a bundle (time tag 1700000000.5) of three messages in order, a nested
                  bundle (immediately) inside it, then a message alone
        press     /agent/pause with the float 1.0 (a TouchOSC button press)
        raw HEX   the bytes of HEX as one datagram (malformed packets, sent as they are)
    osc_peer.py receive COUNT PORT...
        binds 127.0.0.1 on each PORT (0: any free one), prints `LISTENING p1 p2 ...`, then
        one JSON line per datagram received, until COUNT messages or 60 s:
        {"port", "bundle": bool, "timetag", "messages": [{"address", "tags", "args"}]}
"""

import base64
import json
import select
import socket
import struct
import sys
import time

from pythonosc import osc_bundle_builder, osc_message_builder
from pythonosc.osc_bundle import OscBundle
from pythonosc.osc_message import OscMessage
from pythonosc.parsing import osc_types


def message(address, *args):
    builder = osc_message_builder.OscMessageBuilder(address=address)
    for value, kind in args:
        builder.add_arg(value, kind)
    return builder.build()


def scenario(name, rest):
    if name == "types":
        every = message(
            "/types",
            (7, "i"),
            (-(1 << 40), "h"),
            (0.25, "f"),
            (0.1, "d"),
            ("héllo", "s"),
            (b"\x00\x01\xff", "b"),
            (0xFF0010FF, "r"),
            ((0, 0x90, 60, 100), "m"),
            (True, "T"),
            (False, "F"),
            (None, "N"),
            ([1, "x", [2.5]], ["i", "s", ["f"]]),
        )
        # python-osc reads time tags but its builder does not write them: the argument is
        # written with its own helpers, as a sender that does would.
        timed = (
            osc_types.write_string("/time")
            + osc_types.write_string(",t")
            + osc_types.write_date(1700000000.5)
        )
        return [every.dgram, timed, message("/none").dgram]
    if name == "bundles":
        outer = osc_bundle_builder.OscBundleBuilder(1700000000.5)
        outer.add_content(message("/first", (1, "i")))
        inner = osc_bundle_builder.OscBundleBuilder(osc_bundle_builder.IMMEDIATELY)
        inner.add_content(message("/inner/a", ("a", "s")))
        inner.add_content(message("/inner/b", ("b", "s")))
        outer.add_content(inner.build())
        outer.add_content(message("/last", (3, "i")))
        return [outer.build().dgram, message("/alone", (4, "i")).dgram]
    if name == "press":
        return [message("/agent/pause", (1.0, "f")).dgram]
    if name == "raw":
        return [bytes.fromhex(rest[0])]
    raise SystemExit(f"unknown scenario {name}")


def send(host, port, name, rest):
    bind = None
    if name != "raw" and rest:
        bind = rest[0]
    elif name == "raw" and len(rest) > 1:
        bind = rest[1]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if bind:
        sock.bind((bind, 0))
    for dgram in scenario(name, rest):
        sock.sendto(dgram, (host, int(port)))
    sock.close()


def as_json(value):
    if isinstance(value, bytes):
        return {"blob": base64.b64encode(value).decode()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def read_message(dgram):
    address, index = osc_types.get_string(dgram, 0)
    tags = ""
    if index < len(dgram):
        tags, _ = osc_types.get_string(dgram, index)
    parsed = OscMessage(dgram)
    return {"address": address, "tags": tags.lstrip(","), "args": as_json(parsed.params)}


def read_packet(dgram):
    if OscBundle.dgram_is_bundle(dgram):
        bundle = OscBundle(dgram)
        seconds, fraction = struct.unpack(">II", dgram[8:16])
        messages = []
        for content in bundle:
            if isinstance(content, OscBundle):
                messages.extend(read_packet(content.dgram)["messages"])
            else:
                messages.append(read_message(content.dgram))
        return {"bundle": True, "timetag": [seconds, fraction], "messages": messages}
    return {"bundle": False, "timetag": None, "messages": [read_message(dgram)]}


def receive(count, ports):
    socks = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", int(port)))
        socks.append(sock)
    print("LISTENING " + " ".join(str(s.getsockname()[1]) for s in socks), flush=True)
    deadline = time.monotonic() + 60
    seen = 0
    while seen < count and time.monotonic() < deadline:
        ready, _, _ = select.select(socks, [], [], 1.0)
        for sock in ready:
            dgram, _ = sock.recvfrom(65536)
            packet = read_packet(dgram)
            packet["port"] = sock.getsockname()[1]
            print(json.dumps(packet), flush=True)
            seen += len(packet["messages"])


def main():
    if sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    elif sys.argv[1] == "receive":
        receive(int(sys.argv[2]), sys.argv[3:])
    else:
        raise SystemExit("send or receive")


if __name__ == "__main__":
    main()
