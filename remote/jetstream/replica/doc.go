package replica
