#!/usr/bin/python3
"""python3 /run/allox/network.py ARGS... is /run/allox/bin/allox network ARGS... (the seed's spelling)."""
import os
import sys

CLIENT = "/run/allox/bin/allox"

try:
    os.execv(CLIENT, [CLIENT, "network"] + sys.argv[1:])
except OSError as e:
    sys.exit("network.py: cannot run the allox client %s: %s (it is bound into every sandboxed run)" % (CLIENT, e.strerror))
