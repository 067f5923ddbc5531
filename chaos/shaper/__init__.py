"""The NFQUEUE userspace shaper, for kernels without sch_netem (and for protocol-aware faults everywhere).

- `spec`: what one shaper process does (link faults per peer address, message rules, seed), as JSON;
- `msgrules`: protocol-aware rules (drop, delay, duplicate, hold, drop-first, drop-nth of one message type);
- `engine`: the pure, seeded per-packet decisions;
- `ipv4`: IPv4/UDP bytes (parse, rewrite with checksums, flip a bit);
- `__main__`: the process: NetfilterQueue binding, timer heap, raw socket for extra packets;
- `control`: the controller side: start, reload and stop a node's shaper and its iptables queue chain,
  everything recorded in the ledger first;
- `netem`, `statloss`: the kernel backends (tc netem where it exists; iptables statistic for pure loss).
"""
