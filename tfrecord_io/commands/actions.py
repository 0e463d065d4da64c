"""A command made of actions (``hdfs-local start``, ``flink-local fetch``): each action's own parser.

Kept import-light (argparse only): the commands' ``configure`` runs for every ``tfrecord-io --help``.
"""

from __future__ import annotations

import argparse

__all__ = ["ActionParser"]


class ActionParser(argparse.ArgumentParser):
    """An action's parser: a flag the action does not take is an error with the action's usage
    (argparse leaves it to the top parser, whose usage says nothing of the action's flags)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras
