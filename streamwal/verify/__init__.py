"""``streamwal verify``: check a channel's whole log against the WAL's rules.

A product command, because an operator checks a production channel with it; the
lab's chaos runner calls the same checker after each scenario.

- :mod:`streamwal.verify.cli`: the command, reading a channel with a plain Pulsar reader;
- :mod:`streamwal.verify.history`: the streaming checker of a log's history (time
  ticks, owners, acknowledgements, transactions), fed one entry at a time;
- :mod:`streamwal.verify.store`: its on-disk store of per-message digests;
- :mod:`streamwal.verify.acks`: the acknowledgement records clients write and it reads;
- :mod:`streamwal.verify.transactions`: the exactly-once and transaction rules.
"""
