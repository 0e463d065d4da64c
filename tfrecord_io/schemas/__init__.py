"""Schemas shipped with the package (the demo's ``taxi.yaml``; ``conf/taxi.yaml`` links here)."""
