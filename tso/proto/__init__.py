"""Generated gRPC code of the TSO service (see ``scripts/gen_protos.py``)."""
