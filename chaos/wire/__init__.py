"""Packets on the data network from outside the nodes: the scapy dissector of the node wire format (dissect),
forged and replayed datagrams (inject), pcap capture (capture) and UDP reachability probes (probe)."""
