"""tshark (Debian's package) decodes the capture of a live run with the dissector `splitlab wireshark lua` prints:
every message type of the registry appears (the run's own unicasts, multicasts, pings, acks, syncs and views,
and one datagram of each type the run did not send, injected into its data network from n3's namespace under a
stranger's name, which the nodes drop), every frame's fields equal what the codec decodes from the same bytes, and
the data messages n2 received from n1 carry the seqnos and conn ids of n1's `data_tx` events in its history."""
from __future__ import annotations

import time
from collections import Counter

from chaos.cli.main import main as splitlab
from chaos.net.docker import DockerNet
from chaos.wire.capture import read_pcap
from node import history, wire
from tests.unit.wire_samples import expected, messages_of, pdml_frames, proto, run_tshark, sample

COUNT = 30


def wait_for(predicate, timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_tshark_decodes_a_live_runs_capture_as_the_codec_and_the_history_say(splitlab_up, tmp_path, capsys):
    run = splitlab_up(3)
    net = DockerNet(run, seed=3)
    pcap = run.run_dir / "chaos" / "live.pcap"
    pcap.parent.mkdir(parents=True, exist_ok=True)
    n1, n2 = run.client("n1"), run.client("n2")
    cluster_id = wire.cluster_id_of(run.run_id)
    try:
        with net.capture(pcap):
            wait_for(lambda: len(read_pcap(pcap)) > 3, what="the capture records heartbeats")
            # unpaced: bundles above the MTU, which travel as IP fragments and are captured reassembled
            n1.unicast("n2", count=COUNT, size=60, rate=0)
            n1.multicast(count=COUNT, size=60, rate=0)
            n1.ping("n2", count=3, interval_ms=5)
            n2.admin("sync", "n1")  # SYNC, SYNC-OK, SYNC-ACK
            wait_for(lambda: n2.state()["counters"].get("delivered", 0) >= 2 * COUNT, what="n2 delivers")
            time.sleep(1.0)  # acks, heartbeats and view announcements go on
            seen = _types_in(read_pcap(pcap), cluster_id)
            for code, cls in sorted(wire.message_types().items()):
                if cls.__name__ not in seen:
                    net.inject("n3", "n1", wire.encode_datagram(cluster_id, "x9", [sample(cls)]))
            time.sleep(1.0)
    finally:
        net.heal_all()
    lua = tmp_path / "splitlab.lua"
    assert splitlab(["wireshark", "lua"]) == 0
    lua.write_text(capsys.readouterr().out)
    frames = pdml_frames(run_tshark(lua, pcap, "-T", "pdml"))
    packets = [ip for _, ip in read_pcap(pcap)]
    assert len(frames) == len(packets) > 0
    types: Counter = Counter()
    data_at_n2: set[tuple[int, int]] = set()
    n2_ip = run.node("n2").data_ip
    for frame, ip in zip(frames, packets):
        sender, messages = wire.decode_datagram(ip[28:], cluster_id)  # IPv4 (20) and UDP (8) headers
        assert messages_of(frame) == [expected(m) for m in messages], (sender, messages)
        assert proto(frame).find("field[@name='splitlab.sender']").get("show") == sender
        types.update(m.type_name for m in messages)
        if sender == "n1" and ip[16:20] == bytes(int(x) for x in n2_ip.split(".")):
            data_at_n2 |= {(m.seqno, m.conn_id) for m in messages if isinstance(m, wire.UnicastData)}
    assert set(types) == {cls.__name__ for cls in wire.message_types().values()}, types
    events = history.read(run.run_dir / "events" / "n1.jsonl")
    sent = {(e["seqno"], e["conn_id"]) for e in events
            if e["type"] == "data_tx" and e.get("proto") == "unicast3" and e.get("to") == "n2"}
    assert len(sent) >= COUNT and sent <= data_at_n2, sorted(sent - data_at_n2)[:10]
    assert max(len(ip) for ip in packets) > 1500, "a bundle above the MTU is in the capture, reassembled"


def _types_in(packets, cluster_id: int) -> set[str]:
    """The message types of the well-formed datagrams captured so far."""
    out = set()
    for _, ip in packets:
        try:
            out |= {m.type_name for m in wire.decode_datagram(ip[28:], cluster_id)[1]}
        except wire.WireError:
            continue
    return out
