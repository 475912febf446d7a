"""Exhaustive enumerations that brute-force checks compare optimisers against."""

import itertools


def compositions(total, parts):
    """All tuples of `parts` non-negative ints summing to `total`."""
    for cuts in itertools.combinations(range(total + parts - 1), parts - 1):
        prev, out = -1, []
        for c in cuts:
            out.append(c - prev - 1)
            prev = c
        out.append(total + parts - 2 - prev)
        yield tuple(out)
