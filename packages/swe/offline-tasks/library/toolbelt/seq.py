"""Sequence helpers."""


def chunk(items, size):
    """Split items into lists of at most size elements."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def flatten(nested):
    """Flatten one level of nesting."""
    out = []
    for inner in nested:
        out.extend(inner)
    return out


def dedupe(items):
    """Remove duplicates, keeping the first occurrence of each element."""
    seen = set()
    out = []
    for item in items:
        if item in seen:
            continue
        seen.add(item)
        out.append(item)
    return out


def windows(items, size):
    """All contiguous windows of the given size, as tuples."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [tuple(items[i : i + size]) for i in range(len(items) - size + 1)]


def rotate(items, steps):
    """Rotate a list to the right by steps (negative steps rotate left)."""
    if not items:
        return []
    steps = steps % len(items)
    return list(items[-steps:]) + list(items[:-steps]) if steps else list(items)


def take_while(predicate, items):
    """Leading elements for which predicate holds."""
    out = []
    for item in items:
        if not predicate(item):
            break
        out.append(item)
    return out


def group_by(key, items):
    """Dictionary from key(item) to the list of items with that key, in input order."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def index_of(items, target, start=0):
    """Index of the first element equal to target at or after start, or -1."""
    for i in range(start, len(items)):
        if items[i] == target:
            return i
    return -1
