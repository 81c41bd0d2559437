"""ListOps-SubTrees (Gupta et al. 2022 §3.2): tag every closing bracket of a long ListOps expression with the value of
its sub-expression.

Example (tokens separated by spaces)::

    [MAX 2 6 [MED [SM 3 1 6 ] 8 3 ] 4 5 ]
    targets at the three "]":  0 (SM: sum mod 10), 3 (MED), 6 (MAX); every other position −100

Operators MAX, MIN, MED (median; for an even count the mean of the two middle values rounded down, as LRA's
``int(np.median)``) and SM (sum modulo 10); leaves are digits 0–9. Expressions have between ``min_len`` and
``seq_len`` tokens (the paper: 7000–8192; by default ``min_len`` is ⌊7000/8192 · seq_len⌋, the same proportion)
and are right-padded to ``seq_len``.

Generation (vectorized over a batch of expressions, level by level): each expression's length is drawn
uniformly from [``min_len``, ``seq_len``] and met exactly; operators take 2..``max_args`` arguments and nest at
most ``max_depth`` deep (LRA's ListOps limits: 10 and 10). An operator's remaining tokens are split among its
children: the arity uniform over the feasible ones, the number of operator children uniform over the feasible
ones, their token budgets a random composition. Operators and digits are uniform. (The paper does not say how
its expressions were drawn; LRA's generator grows random trees and filters them by length, which almost never
yields 7000+ tokens.)

Vocabulary: digits 0–9 are tokens 0–9, then ``[MAX`` 10, ``[MIN`` 11, ``[MED`` 12, ``[SM`` 13, ``]`` 14, pad 15.
Head: tagging with 10 classes; metric: accuracy over the tagged positions (the paper's token-wise accuracy).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from seqdyn.tasks.base import IGNORE_INDEX, Param, Task, TaskSpec, register, token_accuracy

MAX, MIN, MED, SM, CLOSE, PAD = 10, 11, 12, 13, 14, 15
TOKEN_NAMES = [str(d) for d in range(10)] + ["[MAX", "[MIN", "[MED", "[SM", "]", "<pad>"]
_CHUNK = 128  # expressions processed together


@register
class ListOpsSubTrees(Task):
    """Sequence-tagging ListOps: every ``]`` is labelled with its sub-tree's value."""

    name = "listops_subtrees"
    family = "higher-order"
    reference = "Gupta et al. 2022 §3.2 (ListOps-SubTrees)"
    head_kind = "tagging"
    PARAMS = {
        "seq_len": Param(8192, int, "maximum expression length; sequences are padded to it", low=4),
        "min_len": Param(
            None, int, "minimum expression length; None: the paper's 7000/8192 of seq_len", low=4, optional=True
        ),
        "max_args": Param(10, int, "maximum arguments of an operator (LRA: 10)", low=4),
        "max_depth": Param(10, int, "maximum nesting of operators (LRA: 10)", low=1),
    }

    def _check(self) -> None:
        if self.min_len is None:  # the paper's 7000–8192 range, scaled to seq_len
            self.min_len = self.params["min_len"] = max(4, self.seq_len * 7000 // 8192)
        if self.min_len > self.seq_len:
            self._fail(f"parameter min_len={self.min_len} must be <= seq_len={self.seq_len}")
        longest = capacity(self.max_args, self.max_depth)
        if longest < self.seq_len:
            self._fail(
                f"parameter max_depth={self.max_depth} with max_args={self.max_args} allows expressions of at most "
                f"{longest} tokens, fewer than seq_len={self.seq_len}"
            )
        if (self.max_args + 1.0) ** self.max_depth * _CHUNK >= 2**62:
            self._fail(f"parameter max_depth={self.max_depth} too large for max_args={self.max_args}")

    token_names = TOKEN_NAMES  # token id → its text

    def _spec(self) -> TaskSpec:
        return TaskSpec("tokens", len(TOKEN_NAMES), self.seq_len, self.head_kind, 10, self.seq_len, "accuracy")

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        inputs = np.full((n, self.seq_len), PAD, dtype=np.int64)
        targets = np.full((n, self.seq_len), IGNORE_INDEX, dtype=np.int64)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            self._fill(rng, inputs[start:stop], targets[start:stop])
        return inputs, targets

    def _fill(self, rng: np.random.Generator, inputs: np.ndarray, targets: np.ndarray) -> None:
        forest = _random_forest(rng, inputs.shape[0], self.min_len, self.seq_len, self.max_args, self.max_depth)
        size = forest.degree.size
        kind = np.where(forest.degree > 0, rng.integers(MAX, SM + 1, size=size), rng.integers(0, 10, size=size))
        tokens = _layout(forest)
        value = _evaluate(forest, kind, tokens)
        inputs[tokens.node_row, tokens.node_pos] = kind
        inner = forest.degree > 0
        inputs[tokens.node_row[inner], tokens.close_pos] = CLOSE
        targets[tokens.node_row[inner], tokens.close_pos] = value[inner]

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Accuracy over all tagged positions, and over the last tag of each expression (the full expression)."""
        outputs = self._output_window(outputs.detach(), targets)
        targets = targets.to(outputs.device)
        labelled = targets != IGNORE_INDEX
        last = labelled.shape[1] - 1 - labelled.flip(1).int().argmax(1)
        rows = torch.arange(targets.shape[0], device=targets.device)
        root_hits = outputs[rows, last].argmax(-1) == targets[rows, last]
        return {
            "accuracy": token_accuracy(outputs, targets),
            "root_accuracy": float(root_hits.float().mean()),
            "loss": float(self.loss(outputs, targets)),
        }

    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0, max_tokens: int = 80) -> str:
        x, y = inputs[index].tolist(), targets[index].tolist()
        length = sum(t != PAD for t in x)
        cells = [TOKEN_NAMES[t] + (f"={v}" if v != IGNORE_INDEX else "") for t, v in zip(x[:length], y[:length])]
        if len(cells) > max_tokens:
            cells = cells[: max_tokens // 2] + [f"… ({len(cells) - max_tokens} more) …"] + cells[-max_tokens // 2 :]
        tags = sum(v != IGNORE_INDEX for v in y)
        return f"listops_subtrees: {length} tokens, {tags} tagged brackets (]=value)\n" + " ".join(cells)


class _Forest(NamedTuple):
    """Trees in prefix order, concatenated: per node its ``degree`` (0 for a digit), ``row`` (expression) and
    ``local`` index within its tree; ``starts`` of each tree."""

    degree: np.ndarray
    row: np.ndarray
    local: np.ndarray
    starts: np.ndarray


def capacity(max_args: int, depth: int) -> int:
    """Tokens of the longest expression with at most ``depth`` nested operators of at most ``max_args`` arguments."""
    tokens = 1
    for _ in range(depth):
        tokens = 2 + max_args * tokens
    return tokens


def _random_forest(
    rng: np.random.Generator, n: int, min_len: int, max_len: int, max_args: int, max_depth: int
) -> _Forest:
    """``n`` random expression trees with exactly ``length ~ U[min_len, max_len]`` tokens each, in prefix order.

    Built level by level: every node holds a token budget (1 for a digit, >= 4 for an operator); an operator
    spends 2 tokens on its brackets and splits the rest among its children (see ``_split``). A node is keyed
    by its path from the root (child indices as digits), so sorting the keys gives the prefix order.
    """
    base = max_args + 1
    budget = rng.integers(min_len, max_len + 1, size=n)
    row, key = np.arange(n), np.zeros(n, dtype=np.int64)
    rows, keys, degrees = [], [], []
    for depth in range(max_depth + 1):
        degree = np.zeros(budget.size, dtype=np.int64)
        rows.append(row)
        keys.append(key)
        degrees.append(degree)
        inner = np.flatnonzero(budget > 1)
        if inner.size == 0:
            break
        room = capacity(max_args, max_depth - depth - 1)
        child_budget, parent, index, arity = _split(rng, budget[inner] - 2, room, max_args)
        degree[inner] = arity
        row = row[inner][parent]
        key = key[inner][parent] + (index + 1) * base ** (max_depth - depth - 1)
        budget = child_budget
    row, key, degree = np.concatenate(rows), np.concatenate(keys), np.concatenate(degrees)
    order = np.lexsort((key, row))
    row, degree = row[order], degree[order]
    sizes = np.bincount(row, minlength=n)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return _Forest(degree, row, np.arange(row.size) - starts[row], starts)


def _split(rng: np.random.Generator, tokens: np.ndarray, room: int, max_args: int):
    """Split each operator's child tokens ``R`` among its children: (child budgets, parent, index, arity).

    An operator takes k ∈ [2, max_args] children of which j are operators (budget 4 .. ``room``) and k − j are
    digits (budget 1), with (k − j) + Σ budgets = R: k is uniform over the feasible arities, then j uniform over
    the feasible counts; the operators' budgets above 4 are a random composition (capped at ``room``); which
    children are operators is a random choice.
    """
    m = tokens.size
    k = np.arange(2, max_args + 1)[None, :, None]
    j = np.arange(max_args + 1)[None, None, :]
    R = tokens[:, None, None]
    feasible = (j <= k) & np.where(j == 0, R == k, (3 * j <= R - k) & (R - k + j <= room * j))
    if not feasible.any(axis=(1, 2)).all():
        raise RuntimeError("listops_subtrees: no arity fits a token budget; max_args must be >= 4")
    pick_k = np.where(feasible.any(axis=2), rng.random(feasible.shape[:2]), -1.0).argmax(axis=1)
    arity = pick_k + 2
    options = feasible[np.arange(m), pick_k]
    ops = np.where(options, rng.random(options.shape), -1.0).argmax(axis=1)
    extra = tokens - arity - 3 * ops  # tokens beyond 4 per operator child and 1 per digit child

    cuts = np.floor(rng.random((m, max_args - 1)) * (extra[:, None] + 1)).astype(np.int64)
    cuts = np.where(np.arange(max_args - 1) < ops[:, None] - 1, cuts, extra[:, None])
    bounds = np.concatenate([np.zeros((m, 1), np.int64), np.sort(cuts, axis=1), extra[:, None]], axis=1)
    shares = np.diff(bounds, axis=1)  # the first ``ops`` entries sum to ``extra``; the others are 0
    active = np.arange(max_args) < ops[:, None]
    excess = np.where(active, np.clip(shares - (room - 4), 0, None), 0).sum(axis=1)
    shares = np.where(active, np.minimum(shares, room - 4), 0)
    while excess.any():  # hand what a capped child could not take to the child with the most room left
        space = np.where(active, room - 4 - shares, -1)
        target = space.argmax(axis=1)
        give = np.minimum(excess, np.maximum(space[np.arange(m), target], 0))
        shares[np.arange(m), target] += give
        excess -= give

    parent = np.repeat(np.arange(m), arity)
    index = np.arange(parent.size) - np.repeat(np.cumsum(arity) - arity, arity)
    rank = np.empty(parent.size, dtype=np.int64)  # a random order of each operator's children
    order = np.lexsort((rng.random(parent.size), parent))
    rank[order] = index
    is_op = rank < ops[parent]
    budget = np.where(is_op, 4 + shares[parent, np.minimum(rank, max_args - 1)], 1)
    return budget, parent, index, arity


class _Layout(NamedTuple):
    """Token positions of each node and of each operator's ``]`` (operators in node order), and node depths."""

    node_row: np.ndarray
    node_pos: np.ndarray
    close_pos: np.ndarray
    depth: np.ndarray


def _layout(forest: _Forest) -> _Layout:
    """Where every token goes, from the prefix-order degrees alone (Łukasiewicz walk W_t = Σ_{u≤t} (degree_u − 1))."""
    degree, row, local, starts = forest
    size = degree.size
    walk = np.cumsum(degree - 1)
    walk -= np.concatenate([[0], walk])[starts][row]  # W_t within each tree; W = −1 at a tree's last node
    before = walk - (degree - 1)  # W_{t−1}
    # the subtree of node t ends at the first u >= t with W_u = W_{t−1} − 1 (the walk steps down by one)
    span = int(local.max()) + 2
    levels = int(walk.max()) + 2
    event = (row * levels + (walk + 1)) * span + local
    query = (row * levels + before) * span + local
    event_order = np.argsort(event, kind="stable")
    end = event_order[np.searchsorted(event[event_order], query)]
    inner = np.flatnonzero(degree > 0)
    closes = np.bincount(end[inner], minlength=size)  # closing brackets right after each leaf
    emitted = np.cumsum(closes) - closes
    emitted -= emitted[starts][row]
    node_pos = local + emitted
    # brackets closing after the same leaf: the deepest (latest-opened) first
    order = np.lexsort((-inner, end[inner]))
    same = end[inner][order]
    group_start = np.concatenate([[True], same[1:] != same[:-1]])
    rank = np.arange(order.size) - np.maximum.accumulate(np.where(group_start, np.arange(order.size), 0))
    close_pos = np.empty(inner.size, dtype=np.int64)
    close_pos[order] = node_pos[same] + 1 + rank
    opened = np.cumsum(degree > 0) - (degree > 0)
    opened -= opened[starts][row]
    return _Layout(row, node_pos, close_pos, depth=opened - emitted)  # brackets open before each node


def _evaluate(forest: _Forest, kind: np.ndarray, layout: _Layout) -> np.ndarray:
    """The value of every node, computed level by level from the deepest operators up."""
    degree, row = forest.degree, forest.row
    depth = layout.depth
    value = np.where(degree == 0, kind, -1)
    inner = np.flatnonzero(degree > 0)
    # parent = the last operator before the node at depth − 1 in the same expression
    span = int(layout.node_pos.max()) + 1
    levels = int(depth.max()) + 2
    op_key = (row[inner] * levels + depth[inner]) * span + layout.node_pos[inner]
    key_order = np.argsort(op_key)
    sorted_keys = op_key[key_order]
    child = np.flatnonzero(forest.local > 0)
    child_key = (row[child] * levels + depth[child] - 1) * span + layout.node_pos[child]
    parent = inner[key_order[np.searchsorted(sorted_keys, child_key) - 1]]
    for level in range(int(depth[inner].max()), -1, -1):
        at = depth[child] == level + 1
        kids, parents = child[at], parent[at]
        if parents.size == 0:
            continue
        order = np.lexsort((value[kids], parents))
        kids, parents = kids[order], parents[order]
        vals = value[kids]
        first = np.flatnonzero(np.concatenate([[True], parents[1:] != parents[:-1]]))
        heads = parents[first]
        count = np.diff(np.append(first, parents.size))
        result = np.select(
            [kind[heads] == MAX, kind[heads] == MIN, kind[heads] == MED],
            [
                np.maximum.reduceat(vals, first),
                np.minimum.reduceat(vals, first),
                (vals[first + (count - 1) // 2] + vals[first + count // 2]) // 2,
            ],
            np.add.reduceat(vals, first) % 10,
        )
        value[heads] = result
    return value
