"""The NFQUEUE userspace shaper, for kernels without sch_netem (and for protocol-aware faults everywhere).

- `spec`: what one shaper process does (link faults per peer address, message rules, seed), as JSON;
- `engine`: the pure, seeded per-packet decisions (message rules: `chaos.faults.msgrules`);
- `ipudp`: IPv4/UDP and IPv6/UDP bytes (parse, rewrite with checksums, flip a bit);
- `disttable`: iproute2's delay distribution tables and netem's correlated draws;
- `resend`: sending the shaper's own packets (duplicates, split or held messages), fragmented by the kernel;
- `nfq`: the kernel's NFQUEUE over netlink: whole packets in, verdicts one by one or in batches;
- `__main__`: the process: the queue, timer heap, counters;
- `control`: the controller side: start, reload and stop a node's shaper and its queue chain
  (`chaos.net.iptables.QUEUE`), everything recorded in the ledger first, and the shaper's counters read back.
The kernel backends are `chaos.net.netem` (tc netem where it exists) and `chaos.net.statloss` (iptables
statistic for pure loss).
"""
