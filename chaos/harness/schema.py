"""The scenario file's shape, as pydantic models: types, ranges and closed vocabularies (no cross-references).

    name, description, seed
    cluster:   nodes (count up to node.config.MAX_NODES, named n1..nN), kind, auth (the authenticated wire),
               defaults (NodeSettings: layer names from node.layers' registry), overrides {node: NodeSettings}
    variants:  {name: NodeSettings + kind, auth + overrides {node: NodeSettings}}   e.g. legacy, fixed
    steps:     [{at_s | after (+ delay_s, timeout_s), id, duration_s, <one action>}]   see ACTIONS
    settle_s:  seconds to wait after the final heal before the analysis
    expect:    {variant | default: {check: ok | fail | {status, <check parameters>}, rate: ">= 0.95"}}
               (rate: the share of runs that must hold under `splitlab run --repeat N`)

Cross-references (node names, grudges, message types, check names and parameters) are checked by
`chaos.harness.load`, which also turns pydantic's errors into `file:line: field: expected ...` lines.
"""
from __future__ import annotations

from dataclasses import fields as dc_fields
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, create_model,
                      model_validator)
from pydantic_core import PydanticCustomError

from chaos.faults.grudge import DEFAULT_LIMIT_PKTS, DISTRIBUTIONS, MAX_LIMIT_PKTS, Jam
from node.sim.jam import MAX_HELD, RELEASES
from node.config import NODE_COUNT, check_node_count
from node.errors import ConfigError, UsageError
from node.layers import layer_choices
from node.membership import MembershipConfig
from node.multicast import Nakack4Config
from node.unicast import UnicastConfig

MAX_TIME_S = 3600.0
STRICT = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

NodeName = Annotated[str, Field(min_length=1, max_length=32)]
Seconds = Annotated[float, Field(ge=0, le=MAX_TIME_S)]
Millis = Annotated[int, Field(ge=0, le=3_600_000)]
Pct = Annotated[float, Field(ge=0, le=100)]
PositiveSeconds = Annotated[float, Field(gt=0, le=MAX_TIME_S)]
StepId = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")]


class Model(BaseModel):
    model_config = STRICT


# --- cluster ----------------------------------------------------------------------------------------------------
# friendly timeout name -> environment variable of the node (node/config.py)
TIMEOUT_ENV: dict[str, str] = {
    "heartbeat_ms": "SPLITLAB_HEARTBEAT_MS",
    "silence_ms": "SPLITLAB_SILENCE_MS",
    "flush_ms": "SPLITLAB_FLUSH_MS",
    "suspect_timeout_ms": "SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS",
    "check_interval_ms": "SPLITLAB_MEMBERSHIP_CHECK_INTERVAL_MS",
    "merge_interval_ms": "SPLITLAB_MEMBERSHIP_MERGE_INTERVAL_MS",
    "view_resend_ms": "SPLITLAB_MEMBERSHIP_VIEW_RESEND_MS",
    "join_timeout_ms": "SPLITLAB_MEMBERSHIP_JOIN_TIMEOUT_MS",
    "conn_close_timeout_ms": "SPLITLAB_UNICAST_CONN_CLOSE_TIMEOUT_MS",
    "sync_min_interval_ms": "SPLITLAB_UNICAST_SYNC_MIN_INTERVAL_MS",
    "sync_timeout_ms": "SPLITLAB_UNICAST_SYNC_TIMEOUT_MS",
    "max_retransmit_time_ms": "SPLITLAB_UNICAST_MAX_RETRANSMIT_TIME_MS",
    "unicast_xmit_interval_ms": "SPLITLAB_UNICAST_XMIT_INTERVAL_MS",
    "multicast_xmit_interval_ms": "SPLITLAB_NAKACK4_XMIT_INTERVAL_MS",
    "retain_departed_ms": "SPLITLAB_NAKACK4_RETAIN_DEPARTED_MS",
    "bcast_sync_interval_ms": "SPLITLAB_NAKACK4_SYNC_INTERVAL_MS",
}

Timeouts = create_model("Timeouts", __config__=STRICT,
                        **{name: (Optional[Millis], None) for name in TIMEOUT_ENV})  # type: ignore[call-overload]


def _settings_model(name: str, cls: type) -> type[BaseModel]:
    """A model with every field of a layer's settings dataclass, all optional (ints; bools stay bools)."""
    spec: dict[str, Any] = {}
    for f in dc_fields(cls):
        kind = bool if f.type in (bool, "bool") else int
        spec[f.name] = (Optional[kind], None)
    return create_model(name, __config__=STRICT, **spec)  # type: ignore[call-overload]


UnicastSettings = _settings_model("UnicastSettings", UnicastConfig)
Nakack4Settings = _settings_model("Nakack4Settings", Nakack4Config)
MembershipSettings = _settings_model("MembershipSettings", MembershipConfig)


def _layer_name(slot: str) -> Any:
    """Text naming a layer registered in `slot` (node.layers), checked when the file is read, so a layer added
    as one file is accepted and a typo lists what is registered (as a closed vocabulary would)."""
    def check(value: str) -> str:
        names = sorted(layer_choices(slot))
        if value not in names:
            shown = [repr(name) for name in names]
            expected = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value
    return Annotated[str, AfterValidator(check)]


PropValue = Union[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.,:\[\]-]*$")], int, float, bool]


class JgroupsSettings(Model):
    """The real JGroups node's own settings (kind `jgroups`, jgnode.config): its unicast protocol, properties of
    its stack's protocols over jgnode.stack's defaults (`{"FD_ALL.timeout": 3000}`), the JVM's heap."""

    unicast: Optional[Literal["UNICAST2", "UNICAST"]] = None
    props: dict[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.]*\.[a-z][a-z0-9_.]*$")], PropValue] = \
        Field(default_factory=dict)
    heap_mb: Optional[Annotated[int, Field(ge=32, le=4096)]] = None


# The settings of splitlab's own node, which a run of another kind cannot take (chaos.harness.load says so).
SPLITLAB_FIELDS = ("unicast", "multicast", "membership", "bcast_sync", "bundle_max_bytes", "unicast_settings",
                   "nakack4_settings", "membership_settings")
NODE_KINDS = ("splitlab", "jgroups")  # chaos.cluster.kinds.KINDS (a unit test keeps the two in step)


class NodeSettings(Model):
    """A node's protocol stack and timing; every field optional (layers are merged, later wins)."""

    unicast: Optional[_layer_name("unicast")] = None  # type: ignore[valid-type]
    multicast: Optional[_layer_name("multicast")] = None  # type: ignore[valid-type]
    membership: Optional[_layer_name("membership")] = None  # type: ignore[valid-type]
    bcast_sync: Optional[Literal["tipc", "legacy"]] = None
    bundle_max_bytes: Optional[Annotated[int, Field(ge=0, le=65_000)]] = None
    timeouts: Optional[Timeouts] = None  # type: ignore[valid-type]
    unicast_settings: Optional[UnicastSettings] = None  # type: ignore[valid-type]
    nakack4_settings: Optional[Nakack4Settings] = None  # type: ignore[valid-type]
    membership_settings: Optional[MembershipSettings] = None  # type: ignore[valid-type]
    jgroups: Optional[JgroupsSettings] = None
    env: dict[str, str] = Field(default_factory=dict)


def _node_count(count: int) -> int:
    """node.config's limit on a cluster's size, reported as `expected <NODE_COUNT>, got N` like `splitlab up`."""
    try:
        return check_node_count(count, "nodes")
    except ConfigError:
        raise PydanticCustomError("node_count", NODE_COUNT) from None


class ClusterSpec(Model):
    nodes: Annotated[int, AfterValidator(_node_count)]
    kind: Literal[NODE_KINDS] = "splitlab"  # type: ignore[valid-type]  # the node implementation of every run
    auth: bool = False  # the authenticated wire: a key per run, every datagram signed (chaos.cluster.authkey)
    defaults: NodeSettings = Field(default_factory=NodeSettings)
    overrides: dict[NodeName, NodeSettings] = Field(default_factory=dict)


class Variant(NodeSettings):
    """Named overrides of the whole cluster (its NodeSettings fields) and of single nodes (`overrides`)."""

    description: str = ""
    kind: Optional[Literal[NODE_KINDS]] = None  # type: ignore[valid-type]  # the cluster's kind unless set
    auth: Optional[bool] = None  # the cluster's auth unless set
    overrides: dict[NodeName, NodeSettings] = Field(default_factory=dict)


# --- steps ------------------------------------------------------------------------------------------------------
class Workload(Model):
    kind: Literal["unicast", "multicast"]
    from_: Union[NodeName, list[NodeName]] = Field(alias="from")
    to: Optional[NodeName] = None
    count: Annotated[int, Field(ge=1, le=1_000_000)]
    size: Annotated[int, Field(ge=0, le=60_000)] = 100
    rate: Annotated[float, Field(ge=0)] = 0.0


class Slow(Model):
    delay_ms: Annotated[float, Field(ge=0, le=60_000)]
    jitter_ms: Annotated[float, Field(ge=0, le=60_000)] = 0.0
    duplicate_pct: Pct = 0.0
    reorder_pct: Pct = 0.0
    corrupt_pct: Pct = 0.0
    rate_kbit: Annotated[float, Field(ge=0)] = 0.0
    delay_corr_pct: Pct = 0.0
    distribution: Literal[DISTRIBUTIONS] = "uniform"
    limit_pkts: Annotated[int, Field(ge=1, le=MAX_LIMIT_PKTS)] = DEFAULT_LIMIT_PKTS
    links: Optional[str] = None


GrudgeSpec = Union[str, dict[NodeName, list[NodeName]]]


class Partition(Model):
    """`partition: {grudge: "n2<-n1", mode: jam, release: shuffle, cap: 500}`: the long form, for a jammed
    partition (what crosses the cut is held and released at the heal) or to write `mode: drop` out."""

    grudge: GrudgeSpec
    mode: Literal["drop", "jam"] = "drop"
    release: Optional[Literal[RELEASES]] = None
    cap: Optional[Annotated[int, Field(ge=1, le=MAX_HELD)]] = None

    @model_validator(mode="after")
    def _jam_options(self) -> "Partition":
        if self.mode != "jam" and (self.release is not None or self.cap is not None):
            raise ValueError("release and cap belong to a jammed partition: add mode: jam")
        return self

    @property
    def jam(self) -> Jam | None:
        return Jam(self.release or "fifo", self.cap) if self.mode == "jam" else None


def _partition_form(value: Any) -> str:
    """Which form a partition is written in: the long form is the mapping with a `grudge` key."""
    if isinstance(value, str):
        return "Grudge"
    if isinstance(value, Partition) or isinstance(value, dict) and "grudge" in value:
        return "Partition"
    return "GrudgeMap" if isinstance(value, dict) else None


PartitionSpec = Annotated[Union[Annotated[str, Tag("Grudge")], Annotated[Partition, Tag("Partition")],
                                Annotated[dict[NodeName, list[NodeName]], Tag("GrudgeMap")]],
                          Discriminator(_partition_form, custom_error_type="partition_form",
                                        custom_error_message="text or a mapping")]


class Flaky(Model):
    loss_pct: Pct
    links: Optional[str] = None


class MsgFault(Model):
    type: Union[str, int]
    from_: NodeName = Field(alias="from")
    to: NodeName
    action: str
    conn_id: Optional[Annotated[int, Field(ge=0)]] = None
    seqno: Optional[Annotated[int, Field(ge=0)]] = None
    first: Optional[bool] = None


RELATIVE_CONN_IDS = ("current", "previous", "next")


class Inject(Model):
    type: Union[str, int]
    from_: NodeName = Field(alias="from")
    to: NodeName
    fields: dict[str, int] = Field(default_factory=dict)
    count: Annotated[int, Field(ge=1, le=10_000)] = 1
    conn_id: Optional[Union[Annotated[int, Field(ge=0, le=0xFFFFFFFF)], Literal[RELATIVE_CONN_IDS]]] = None
    payload: Optional[Annotated[str, Field(max_length=60_000)]] = None
    sign: bool = False  # signed with the run's key (a run with auth); else such a run's nodes drop it


class Restart(Model):
    node: NodeName
    delay_s: Seconds = 0.0


class Pause(Model):
    node: NodeName
    method: Literal["docker", "sigstop"] = "docker"


class Admin(Model):
    op: Literal["sync", "close", "remove", "remove_receive"]
    node: NodeName
    peer: NodeName


class Fault(Model):
    """A registered fault (chaos.faults.registry): its name and arguments, checked against the registry."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _registered(self) -> "Fault":
        from chaos.faults.registry import lookup

        try:
            lookup(self.name, self.args)
        except UsageError as exc:
            raise ValueError(exc.message) from None
        return self


AFTER = ("heal", "view", "workload-done")
DEFAULT_AFTER_TIMEOUT_S = 60.0


class Step(Model):
    """When (`at_s`, or `after` a condition plus `delay_s`), an optional `id` and `duration_s`, and exactly one
    action (checked by `chaos.harness.load` before this model sees the step)."""

    at_s: Optional[Seconds] = None
    after: Optional[Literal[AFTER]] = None
    delay_s: Optional[Seconds] = None
    timeout_s: Optional[PositiveSeconds] = None
    id: Optional[StepId] = None
    duration_s: Optional[PositiveSeconds] = None
    ttl_s: Optional[Annotated[float, Field(ge=0.5, le=86_400)]] = None
    note: str = ""
    workload: Optional[Workload] = None
    partition: Optional[PartitionSpec] = None
    heal: Optional[Literal["partition", "all"]] = None
    slow: Optional[Slow] = None
    fast: Optional[Literal["all"]] = None
    flaky: Optional[Flaky] = None
    shape: Optional[str] = None
    msg_fault: Optional[MsgFault] = Field(default=None, alias="msg-fault")
    inject: Optional[Inject] = None
    pause: Optional[Union[NodeName, Pause]] = None
    resume: Optional[NodeName] = None
    kill: Optional[NodeName] = None
    start: Optional[NodeName] = None
    restart: Optional[Union[NodeName, Restart]] = None
    admin: Optional[Admin] = None
    fault: Optional[Fault] = None
    end: Optional[StepId] = None

    @property
    def action(self) -> str:
        """The action's name (one of ACTIONS)."""
        for name in ACTIONS:
            if name in self.model_fields_set:
                return name
        raise AssertionError("a validated step has an action")

    @property
    def args(self) -> Any:
        return getattr(self, self.action)

    @property
    def wait_s(self) -> float:
        """How long a relative step waits for its condition before the run stops with an error."""
        return self.timeout_s if self.timeout_s is not None else DEFAULT_AFTER_TIMEOUT_S

    @property
    def grudge(self) -> GrudgeSpec | None:
        """A partition step's grudge (None for other actions)."""
        return self.partition.grudge if isinstance(self.partition, Partition) else self.partition

    @property
    def jam(self) -> Jam | None:
        """A jammed partition step's release and cap (None for other steps)."""
        return self.partition.jam if isinstance(self.partition, Partition) else None

    @property
    def restart_node(self) -> str | None:
        """The node a restart step restarts (None for other actions)."""
        if self.restart is None:
            return None
        return self.restart if isinstance(self.restart, str) else self.restart.node

    @property
    def restart_delay_s(self) -> float:
        return 0.0 if self.restart is None or isinstance(self.restart, str) else self.restart.delay_s


# Action names as written in the file (msg-fault is also accepted as msg_fault). Actions without arguments
# (heal, fast) may be written with an empty value: `heal:` / `fast:`.
ACTIONS = ("workload", "partition", "heal", "slow", "fast", "flaky", "shape", "msg_fault", "inject", "pause",
           "resume", "kill", "start", "restart", "admin", "fault", "end")
NO_ARGUMENT = ("heal", "fast")
STEP_KEYS = ("at_s", "after", "delay_s", "timeout_s", "id", "duration_s", "ttl_s", "note")
# faults a step opens that `end: <id>` or the step's own `duration_s` can end (inject and restart are instants)
ENDABLE = ("partition", "slow", "flaky", "shape", "msg_fault", "pause", "kill", "fault")
LINK_ACTIONS = ("slow", "flaky", "shape")
# steps that end faults: what `after: heal` waits for (besides a fault step's own duration_s)
HEALING = ("heal", "fast", "end", "resume", "start")


# --- expectations -----------------------------------------------------------------------------------------------
Status = Literal["ok", "fail", "unknown"]
STATUSES: tuple[str, ...] = get_args(Status)
# An expected reproduction rate, e.g. ">= 0.95" (chaos.harness.repeat reads it; only under the key `rate`).
RATE_PATTERN = r"^\s*(>=|<=|>|<|==)\s*(1(\.0*)?|0?\.\d+|0)\s*$"
RateText = Annotated[str, Field(pattern=RATE_PATTERN)]
RATE_KEY = "rate"


class Scenario(Model):
    name: str = ""
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    cluster: ClusterSpec
    variants: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")], Variant] = Field(default_factory=dict)
    steps: list[Step] = Field(default_factory=list)
    settle_s: Seconds = 5.0
    duration_s: Optional[Seconds] = None
    expect: dict[str, dict[str, Union[Status, RateText, dict[str, Any]]]] = Field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.cluster.nodes + 1)]

    @property
    def timeline_s(self) -> float:
        """Planned length of the timeline: `duration_s`, else the last `at_s`. A run goes on longer when relative
        steps, a step's own `duration_s` or a restart's `delay_s` take it further (chaos.harness.timeline)."""
        last = max((s.at_s for s in self.steps if s.at_s is not None), default=0.0)
        return max(self.duration_s or 0.0, last)
