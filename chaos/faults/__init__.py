"""Faults as plain data: partitions (grudges), link-fault matrices and protocol-aware message rules. Pure
functions, no commands, no root: every network backend reads them."""
