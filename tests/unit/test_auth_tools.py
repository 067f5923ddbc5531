"""The authenticated wire around the nodes: the run's key file (owner only, found from the run directory), `up
--auth` and a scenario's `auth` refused for the JGroups kind (and a JGroups node given a key refusing to start),
inject steps that sign or are refused without a key, `replay --sign`, a scenario run in the simulator on the
authenticated wire, the shaper signing again what its message rules rewrite (and never vouching for a datagram
that was not authentic), the dissector and the capture reader on signed datagrams, captured packets signed again,
and the fuzzer signing after the mutation. No Docker."""
from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from chaos.cli.main import main as splitlab
from chaos.cluster import authkey, kinds, lifecycle
from chaos.cluster.model import NodeInfo
from chaos.faults.grudge import LinkFault
from chaos.faults.msgrules import MsgRule
from chaos.fuzz import campaign, gen as fuzzgen, record as fuzzrecord, run as fuzzrun
from chaos.harness import runner, schedule as schedules
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from chaos.harness.progress import Progress
from chaos.net.shaper import ipudp
from chaos.net.shaper.engine import Engine
from chaos.net.shaper.spec import ShaperSpec
from chaos.wire import dissect, inject
from jgnode.config import from_env as jgroups_from_env
from node import wire
from node.auth import AUTH_KEY_ENV, TAG_BYTES, WireKey
from node.errors import ConfigError, UsageError
from test_fuzzgen import CTX  # the fuzz tests' cluster context (two targets' windows)

KEY = WireKey(bytes(range(32)))
OTHER = WireKey(bytes(range(1, 33)))
A, B = "10.9.0.2", "10.9.0.3"
CID = wire.cluster_id_of("r")


# --- the run's key ------------------------------------------------------------------------------------------------
def test_the_runs_key_is_made_once_owner_only_and_found_from_the_run_directory(tmp_path: Path) -> None:
    assert authkey.read(tmp_path) is None
    with pytest.raises(UsageError, match="--sign: run r1 has no key to sign with: it runs the open wire"):
        authkey.required(tmp_path, "r1")
    key = authkey.create(tmp_path)
    path = tmp_path / authkey.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == key.hex()
    assert authkey.read(tmp_path) == key == authkey.required(tmp_path, "r1")
    with pytest.raises(FileExistsError):
        authkey.create(tmp_path)  # a run has one key
    env = authkey.with_key({"n1": {"SPLITLAB_UNICAST": "unicast2"}}, ["n1", "n2"], key)
    assert env == {"n1": {"SPLITLAB_UNICAST": "unicast2", AUTH_KEY_ENV: key.hex()}, "n2": {AUTH_KEY_ENV: key.hex()}}


REFUSED = "the authenticated wire (auth) is not offered by the jgroups node kind"


def test_up_auth_of_the_jgroups_kind_is_refused_before_anything_starts(monkeypatch, capsys) -> None:
    monkeypatch.setattr(lifecycle, "docker_client", lambda: pytest.fail("Docker was asked"))
    assert kinds.auth_refusal("splitlab") is None and kinds.auth_refusal("jgroups").startswith(REFUSED)
    with pytest.raises(UsageError, match=re.escape(f"--auth: {REFUSED}")):
        lifecycle.up(2, kind="jgroups", auth=True)
    assert splitlab(["up", "-n", "2", "--node-kind", "jgroups", "--auth"]) == 2
    err = capsys.readouterr().err
    assert f"splitlab up: error: --auth: {REFUSED}" in err and "use the splitlab kind" in err


def test_a_jgroups_node_given_a_key_refuses_to_start() -> None:
    env = {"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r", "SPLITLAB_MEMBERS": "n1", "SPLITLAB_TOKEN": "t"}
    assert jgroups_from_env(env).node.auth_key is None
    with pytest.raises(ConfigError, match="SPLITLAB_AUTH_KEY: the JGroups node does not sign or check its wire"):
        jgroups_from_env({**env, AUTH_KEY_ENV: KEY.hex()})


# --- scenarios ----------------------------------------------------------------------------------------------------
SCENARIO = """
name: auth
cluster: {nodes: 2, auth: true, defaults: {membership: none, multicast: none}}
variants:
  signed: {}
  open: {auth: false}
steps:
  - {at_s: 0.5, workload: {kind: unicast, from: n1, to: n2, count: 50}}
  - {at_s: 2, inject: {type: UnicastAck, from: n2, to: n1, fields: {seqno: 5, conn_id: 3}}}
  - {at_s: 2.5, inject: {type: UnicastAck, from: n2, to: n1, fields: {seqno: 5, conn_id: 3}, sign: true}}
settle_s: 1
"""


def problems(text: str, variant: str | None = None) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_text(text, "a.yaml", variant=variant)
    return [str(p) for p in info.value.problems]


def test_a_scenario_says_auth_per_cluster_or_variant_and_its_inject_steps_sign_only_with_a_key() -> None:
    assert load_text(SCENARIO, "a.yaml", variant="signed").auth is True
    assert problems(SCENARIO, "open") == [
        "a.yaml:10: steps[2].inject.sign: sign needs the run's key: this run has the open wire (set cluster.auth: "
        "true or auth: true in variant open)"]
    jgroups = SCENARIO.replace("steps:\n", "  real: {kind: jgroups, membership: null, multicast: null}\nsteps:\n") \
        .replace("defaults: {membership: none, multicast: none}", "defaults: {}")
    refused = problems(jgroups, "real")[0]  # (its inject steps are refused too: JGroups' wire)
    assert refused.startswith(f"a.yaml:3: cluster.auth: {REFUSED}") and refused.endswith("(variant real)")


def test_a_scenario_on_the_authenticated_wire_in_the_simulator(tmp_path: Path) -> None:
    result = runner.run(load_text(SCENARIO, "a.yaml", variant="signed"), backend="sim", seed=2, out=tmp_path,
                        progress=Progress(quiet=True), analyze=False)

    def events(node: str, type_: str) -> list[dict]:
        lines = (result.run_dir / "events" / f"{node}.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["type"] == type_]

    assert len(events("n2", "app_deliver")) == 50
    assert [e["reason"] for e in events("n1", "datagram_dropped")] == ["unauthenticated"]  # the unsigned inject
    assert [e["conn_id"] for e in events("n1", "ack_rx") if e["action"] == "discarded"] == [3]  # the signed one
    assert events("n1", "node_start")[0]["config"]["auth"] is True


def test_replay_sign_makes_every_inject_step_sign() -> None:
    saved = schedules.Schedule(scenario=load_text(SCENARIO, "a.yaml", variant="signed").doc.data, source="a.yaml",
                               variant="signed", seed=0, backend="sim", run_id="r",
                               steps=[schedules.RealisedStep(i, "x", None, 0.5, applied_at_s=0.5 + i)
                                      for i in range(3)])
    plain = [s.get("inject", {}).get("sign") for s in schedules.replay_document(saved)["steps"]]
    signed = [s.get("inject", {}).get("sign") for s in schedules.replay_document(saved, sign=True)["steps"]]
    assert plain == [None, None, True] and signed == [None, True, True]


# --- the shaper ---------------------------------------------------------------------------------------------------
def udp(payload: bytes) -> bytes:
    return ipudp.build(A, B, 7100, 7100, payload)


def engine(key: WireKey | None = KEY, **spec: object) -> Engine:
    rules = spec.pop("rules", [MsgRule(wire.Heartbeat.TYPE, "n1", "n2", "drop")])
    return Engine(ShaperSpec("r", "n1", seed=1, rules=rules, names={A: "n1", B: "n2"},
                             auth_key=key.hex() if key else "", **spec))


def rewritten(shaper: Engine, data: bytes) -> bytes:
    verdict = shaper.process(0.0, udp(data))
    assert verdict.payload is not None, "the rule did not rewrite the datagram"
    return ipudp.parse(verdict.payload).payload


MSGS = [wire.Heartbeat(1), wire.Pong(2), wire.Ping(3)]


def test_the_shaper_signs_again_what_a_message_rule_rewrote() -> None:
    out = rewritten(engine(), wire.encode_datagram(CID, "n1", MSGS, 7, KEY))
    assert wire.check_tag(KEY, out) is None and wire.decode_datagram(out, CID) == ("n1", MSGS[1:])


def test_the_shaper_never_vouches_for_a_datagram_that_was_not_authentic() -> None:
    unsigned = rewritten(engine(), wire.encode_datagram(CID, "n1", MSGS, 7))
    assert not wire.is_signed(unsigned) and wire.decode_datagram(unsigned, CID) == ("n1", MSGS[1:])
    foreign = rewritten(engine(), wire.encode_datagram(CID, "n1", MSGS, 7, OTHER))
    assert wire.check_tag(KEY, foreign) is not None and wire.check_tag(OTHER, foreign) is not None
    no_key = rewritten(engine(key=None), wire.encode_datagram(CID, "n1", MSGS, 7, KEY))
    assert wire.check_tag(KEY, no_key) is not None and wire.decode_datagram(no_key, CID) == ("n1", MSGS[1:])


def test_corruption_on_the_authenticated_wire_breaks_the_tag() -> None:
    shaper = engine(rules=[], links={B: LinkFault(corrupt_pct=100)})
    for n in range(50):
        verdict = shaper.process(0.0, udp(wire.encode_datagram(CID, "n1", [wire.Heartbeat(n)], 7, KEY)))
        assert wire.check_tag(KEY, ipudp.parse(verdict.payload).payload) is not None


def test_the_shaper_spec_carries_the_key_and_is_written_for_its_owner_only(tmp_path: Path) -> None:
    spec = engine().spec
    again = ShaperSpec.from_json(spec.to_json())
    assert again == spec and again.key == KEY and ShaperSpec("r", "n1", seed=1).key is None
    path = tmp_path / "shaper-n1.json"
    spec.write(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# --- dissecting, capturing, replaying ------------------------------------------------------------------------------
def test_the_dissector_and_the_capture_reader_read_signed_datagrams(tmp_path: Path) -> None:
    from chaos.wire.capture import write_pcap
    from pipeline.sequence_wire import captured_ends

    data = wire.encode_datagram(CID, "n1", [wire.UnicastData(4, 7, False, b"x"), wire.Heartbeat(1)], 5, KEY)
    pkt = dissect.dissect(data)
    assert pkt.count == len(pkt.messages) == 2 and pkt.tag == data[-TAG_BYTES:] and bytes(pkt) == data
    assert dissect.fields_of(pkt.messages[0])["seqno"] == 4
    path = tmp_path / "capture.pcap"
    frame = IP(src=A, dst=B) / UDP(sport=wire.DATA_PORT, dport=wire.DATA_PORT) / Raw(data)
    write_pcap(path, [(100.0, bytes(frame))])
    [end] = captured_ends(path, {A: "n1", B: "n2"}, 0.0, 200.0)
    assert (end.src, end.dst, end.msg, end.key) == ("n1", "n2", "UnicastData", (4, 7))


def test_a_captured_packet_is_signed_again_with_the_runs_key() -> None:
    for made in (wire.encode_datagram(CID, "n1", MSGS, 7), wire.encode_datagram(CID, "n1", MSGS, 7, OTHER)):
        again = ipudp.parse(inject.signed_packet(KEY, udp(made))).payload
        assert wire.check_tag(KEY, again) is None and wire.decode_datagram(again, CID) == ("n1", MSGS)
    other = udp(b"\x13\x02 not splitlab")
    assert inject.signed_packet(KEY, other) == other


# --- the fuzzer ---------------------------------------------------------------------------------------------------
class _Injector:
    """Records what the fuzzer sends instead of sending it."""

    sent: list[bytes] = []

    def __init__(self, endpoints: dict) -> None:
        pass

    def __enter__(self) -> "_Injector":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def packet(self, src: str, dst: str, payload: bytes) -> bytes:
        return udp(payload)

    def send_packet(self, via: str, pkt: bytes) -> None:
        self.sent.append(ipudp.parse(pkt).payload)


def test_the_fuzzer_signs_each_datagram_after_its_mutation_and_records_it_as_made(tmp_path: Path,
                                                                                monkeypatch) -> None:
    monkeypatch.setattr(inject, "Injector", _Injector)
    _Injector.sent = []
    cluster = SimpleNamespace(nodes=[NodeInfo(n, f"c{n}", f"10.9.0.{i}", "", i) for i, n in enumerate(CTX.members)],
                              run_dir=tmp_path, run_id="r")
    cases = list(fuzzgen.generate(5, 40, CTX, ["n2"], ("header", "truncated", "valid"), 0.0))
    recorder = fuzzrecord.Recorder(tmp_path, "5", {"run_id": "r"})
    settings = fuzzrun.Settings(targets=["n2"], rate_per_s=0, check_every_s=60, auth_key=KEY)
    fuzzrun.send_cases(cluster, cases, settings, fuzzrun.Outcome(), recorder, lambda _: None)
    recorder.close()
    assert _Injector.sent == [wire.sign(KEY, c.data) for c in cases]
    assert all(KEY.matches(sent) for sent in _Injector.sent)  # the mutation's bytes as they are, tagged
    _, recorded, _ = fuzzrecord.load_replay(recorder.jsonl_path)
    assert [c.data for c in recorded] == [c.data for c in cases]  # as made: --replay --sign signs them again
    options = campaign.Options(sign=True)
    with pytest.raises(UsageError, match="--sign: run r has no key to sign with"):
        campaign._settings(options, ["n2"], cluster)
    authkey.create(tmp_path)
    assert campaign._settings(options, ["n2"], cluster).auth_key == authkey.read(tmp_path)
    assert campaign.reproduce(options, "r", ["n2"]).endswith(" --sign")
