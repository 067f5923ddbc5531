"""The network of one run behind one interface (`base.Net`): the real backend on containers (`docker`: iptables
partitions, netem, the NFQUEUE shaper, iptables statistic loss, process faults) and the simulator backend
(`sim`). `backends` says which link-fault backend this kernel offers."""
