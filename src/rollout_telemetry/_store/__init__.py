"""The stores: the one account of counts, the coverage account and the groups, the names they label with,
the rejection policy, and the snapshots they are read through."""
