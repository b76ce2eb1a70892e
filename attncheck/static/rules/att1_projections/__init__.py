"""ATT1xx: the projections around attention and the head layout between them (Q/K/V and output
projections, dropout, splitting into heads and merging back). ``strides`` is this family's own helper."""
