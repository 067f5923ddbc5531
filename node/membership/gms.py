"""The membership layer (GMS + FD_ALL + MERGE3, scaled down): views installed by the coordinator, suspicion from
heartbeats, and merging of subgroups after a partition heals. Sans-IO.

- Start: every member installs the initial view `(first configured member, 1)` holding every configured member
  (the cluster starts together; a member never heard within `join_timeout_ms` is suspected and excluded like a
  crashed one; until then it has not joined yet and is not suspected).
- Failure detection (`detector.FailureDetector`): every `check_interval` suspicion is re-evaluated from the
  liveness layer's heartbeat record. The *acting* coordinator of a view is its first member not suspected; when
  that is the local member and some member is suspected, it installs a view without the suspected members, id
  `(local, n+1)`. So when the coordinator itself is suspected, the next member takes over.
- Installation: the coordinator installs locally (`InstallView`), sends `ViewMsg` to every other member and
  resends it every `view_resend` until each answers `ViewAck`. A member installs a view that holds it, is newer
  (higher n) than its own and comes from a member it does not suspect; anything else is discarded (a repeat of
  the current view is acknowledged again).
- Merge (MERGE3): every `merge_interval` every member announces its view and its acting coordinator (`ViewInfo`)
  to every configured member. The acting coordinator then looks at the fresh announcements of members it does not
  suspect: a member of its own view announcing an older view missed it and gets it again; every other different
  view is a subgroup. The lowest-ranked acting coordinator of the subgroups leads: it installs a MergeView of the
  union of their members that it does not suspect, id `(first member, highest n + 1)`, and emits `merge`.
- Hostile input: a message from a non-member or claiming to come from this member is dropped; a `ViewMsg` or
  `ViewInfo` whose view cannot be one of this group's (`views.view_problem`: names outside the configuration, a
  member twice, a coordinator that is not its first member, a number 0 or more than `MAX_VIEW_STEP` above ours)
  is dropped. Drops are counted by reason in `counters` (`from_stranger`, `from_self`, `view_<reason>`,
  `info_<reason>`), so a forged datagram can neither install such a view nor drive a merge into one.
- Asymmetric partition (B stops hearing A, A still hears B): B suspects A and installs a view without A; A still
  hears B, so A's view keeps B; A's MergeView cannot reach B and B defers to A as the lower coordinator. So B's
  view lacks A while A's view holds B until the cut heals (the precondition of JGRP-1873).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Hashable, Iterable

from node.core import Effect, Emit, InstallView, Protocol, Send, SetTimer
from node.errors import ConfigError
from node.liveness import Liveness
from node.membership.config import MembershipConfig
from node.membership.detector import FailureDetector
from node.membership.views import View, acting_coordinator, merge_leader, merged_view, view_problem
from node.wire import ViewAck, ViewInfo, ViewMsg

CHECK_TIMER = "check"
MERGE_TIMER = "merge"


@dataclass
class _Info:
    """The last announcement of one member."""

    view: View
    acting: str
    at_s: float


class Membership(Protocol):
    """Views for `local` among the configured members `universe` (in join order); see the module docstring."""

    NAME: ClassVar[str] = "gms"
    MESSAGES: ClassVar[tuple[type, ...]] = (ViewMsg, ViewAck, ViewInfo)

    def __init__(self, local: str, universe: Iterable[str], config: MembershipConfig, liveness: Liveness) -> None:
        self.universe = tuple(universe)
        if local not in self.universe:
            raise ConfigError(f"membership: {local!r} is not among the members {', '.join(self.universe)}")
        self.local = local
        self.config = config
        self.rank = {m: i for i, m in enumerate(self.universe)}
        self.peers = tuple(m for m in self.universe if m != local)
        self.detector = FailureDetector(liveness, self.peers, config.suspect_timeout_ms / 1000,
                                        config.join_timeout_ms / 1000)
        self.view = View((self.universe[0], 1), self.universe)
        self.unacked: dict[str, float] = {}  # coordinator: member -> when the current view was last sent to it
        self.infos: dict[str, _Info] = {}
        self.counters: Counter = Counter()
        self.installed_s = 0.0
        self._check_s = config.check_interval_ms / 1000
        self._merge_s = config.merge_interval_ms / 1000
        self._resend_s = config.view_resend_ms / 1000
        self._info_age_s = config.info_max_age_ms / 1000

    # --- sans-IO entry points -------------------------------------------------------------------------------------
    def start(self, now_s: float) -> list[Effect]:
        """Install the initial view and start the check and merge timers."""
        self.detector.start(now_s)
        self.installed_s = now_s
        return [InstallView(self.view.view_id, self.view.members),
                SetTimer(CHECK_TIMER, now_s + self._check_s), SetTimer(MERGE_TIMER, now_s + self._merge_s)]

    def on_timer(self, now_s: float, key: Hashable) -> list[Effect]:
        if key == CHECK_TIMER:
            out = self.detector.check(now_s)
            out += self._exclude_suspected(now_s)
            out += self._resend_view(now_s)
            out.append(SetTimer(CHECK_TIMER, now_s + self._check_s))
            return out
        if key == MERGE_TIMER:
            out = self._announce()
            out += self._merge_check(now_s)
            out.append(SetTimer(MERGE_TIMER, now_s + self._merge_s))
            return out
        return []

    def on_received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        if src not in self.rank:
            self.counters["from_stranger"] += 1
            return []
        if src == self.local:
            self.counters["from_self"] += 1  # forged: our own views and announcements never come back
            return []
        if isinstance(msg, ViewMsg):
            return self._on_view_msg(now_s, src, msg)
        if isinstance(msg, ViewAck):
            if (msg.coord, msg.n) == self.view.view_id:
                self.unacked.pop(src, None)
            return []
        if isinstance(msg, ViewInfo):
            problem = view_problem(msg.coord, msg.n, tuple(msg.members), self.view.n, self.rank)
            if problem is None and msg.acting not in self.rank:
                problem = "stranger_acting"
            if problem is not None:
                self.counters[f"info_{problem}"] += 1
                return []
            self.infos[src] = _Info(View((msg.coord, msg.n), tuple(msg.members)), msg.acting, now_s)
            return []
        return []

    def on_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list[Effect]:
        """A view given to every layer: ours comes back here (nothing to do); one injected by a test is adopted."""
        if view_id != self.view.view_id:
            self.view = View(tuple(view_id), tuple(members))
            self.unacked.clear()
            self.installed_s = now_s
        return []

    # --- views --------------------------------------------------------------------------------------------------
    @property
    def suspected(self) -> set[str]:
        return self.detector.suspected

    def acting(self) -> str:
        return acting_coordinator(self.view, self.local, self.detector.suspected)

    def _install(self, now_s: float, view: View, subgroups: list[list[str]] | None = None) -> list[Effect]:
        """Install `view` as its coordinator: locally, then a `ViewMsg` to every other member (resent until acked)."""
        self.view = view
        self.installed_s = now_s
        self.infos.clear()
        self.unacked = {m: now_s for m in view.members if m != self.local}
        self.counters["merge_views" if subgroups else "views_installed"] += 1
        out: list[Effect] = [InstallView(view.view_id, view.members)]
        if subgroups:
            out.append(Emit("merge", {"view_id": list(view.view_id), "subgroups": subgroups}))
        msg = ViewMsg(view.coord, view.n, bool(subgroups), view.members)
        out += [Send(m, msg) for m in self.unacked]
        return out

    def _exclude_suspected(self, now_s: float) -> list[Effect]:
        suspected = self.detector.suspected
        if self.acting() != self.local or not any(m in suspected for m in self.view.members):
            return []
        members = tuple(m for m in self.view.members if m == self.local or m not in suspected)
        return self._install(now_s, View((members[0], self.view.n + 1), members))

    def _resend_view(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        if not self.unacked:
            return out
        msg = ViewMsg(self.view.coord, self.view.n, False, self.view.members)
        for member, sent_s in self.unacked.items():
            if member not in self.detector.suspected and now_s - sent_s >= self._resend_s:
                self.unacked[member] = now_s
                self.counters["view_resent"] += 1
                out.append(Send(member, msg))
        return out

    def _on_view_msg(self, now_s: float, src: str, msg: ViewMsg) -> list[Effect]:
        view = View((msg.coord, msg.n), tuple(msg.members))
        ack = Send(src, ViewAck(msg.coord, msg.n))
        if self.local not in view.members:
            self.counters["view_without_me"] += 1
            return []
        if view.view_id == self.view.view_id:
            return [ack]  # a repeat: our ack was lost
        out = self.detector.check(now_s)  # a heartbeat may have come since the last check
        if view.n <= self.view.n:
            self.counters["view_older"] += 1
            return out
        problem = view_problem(msg.coord, msg.n, view.members, self.view.n, self.rank)
        if problem is not None:  # a newer view that cannot be one of ours: forged or corrupt
            self.counters[f"view_{problem}"] += 1
            return out
        if src in self.detector.suspected:
            self.counters["view_from_suspect"] += 1  # it resends; we take it once we hear it again
            return out
        self.view = view
        self.installed_s = now_s
        self.infos.clear()
        self.unacked.clear()
        return out + [InstallView(view.view_id, view.members), ack]

    # --- merging ------------------------------------------------------------------------------------------------
    def _announce(self) -> list[Effect]:
        msg = ViewInfo(self.view.coord, self.view.n, self.acting(), self.view.members)
        return [Send(peer, msg) for peer in self.peers]

    def _merge_check(self, now_s: float) -> list[Effect]:
        """At the acting coordinator: resend the view to members that missed it, lead or defer a merge."""
        if self.acting() != self.local:
            return []
        out: list[Effect] = []
        own = self.view
        subgroups: dict[tuple[str, int], _Info] = {}
        for peer, info in self.infos.items():
            if now_s - info.at_s > self._info_age_s or peer in self.detector.suspected:
                continue
            if info.view.view_id == own.view_id:
                continue
            if peer in own.members and info.view.n < own.n:  # it missed our view
                if peer not in self.unacked:
                    self.counters["view_resent_behind"] += 1
                    out.append(Send(peer, ViewMsg(own.coord, own.n, False, own.members)))
                continue
            subgroups[info.view.view_id] = info
        if not subgroups:
            return out
        leader = merge_leader(self.local, (i.acting for i in subgroups.values()), self.rank)
        if leader != self.local:
            self.counters["merge_deferred"] += 1
            return out
        others = [i.view for i in subgroups.values()]
        view = merged_view(own, others, self.local, self.detector.suspected, self.rank)
        groups = [list(own.members)] + [list(v.members) for v in others]
        return out + self._install(now_s, view, groups)

    def _order(self, member: str) -> tuple[int, str]:
        """Join order, names outside the configuration last (a view given to the stack may hold one)."""
        return self.rank.get(member, len(self.rank)), member

    # --- state --------------------------------------------------------------------------------------------------
    def state(self, now_s: float) -> dict[str, Any]:
        return {
            "proto": self.NAME, "local": self.local, **self.view.to_state(),
            "acting_coordinator": self.acting(), "installed_ago_ms": round((now_s - self.installed_s) * 1000),
            "suspected": sorted(self.detector.suspected, key=self._order),
            "unacked": sorted(self.unacked, key=self._order),
            "announcements": {p: {"view_id": list(i.view.view_id), "members": list(i.view.members),
                                  "acting": i.acting, "age_ms": round((now_s - i.at_s) * 1000)}
                              for p, i in sorted(self.infos.items())},
            "config": self.config.as_dict(), "counters": dict(self.counters),
        }
