"""``python -m streamwal_lab.chaos.clock_node``: see :mod:`streamwal_lab.chaos.clock_node`.

The entry is a package's ``__main__`` so that the scenarios, which the chaos package
imports, can import the package without it being run a second time as ``__main__``.
"""

import sys

from streamwal_lab.chaos.clock_node import main

sys.exit(main())
