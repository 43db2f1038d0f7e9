"""streamwal's lab: the developer tools, a distribution of their own (``streamwal-lab``).

The local service stack (:mod:`streamwal_lab.stack`), the demo, the benchmarks
(:mod:`streamwal_lab.bench`), the chaos runner (:mod:`streamwal_lab.chaos`), the
fault proxy and the cluster runner. They are kept out of the product (``streamwal``)
so that a production install carries no Maven pom, Go builder manifest or test
harness: the lab depends on the product, never the reverse, and adds its commands to
``streamwal`` through the ``streamwal.commands`` entry points (``lab/pyproject.toml``).
"""
