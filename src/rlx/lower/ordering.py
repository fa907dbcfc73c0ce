"""Ordering and scan lowerings: topk, sort, argsort, cumulative reductions, flip, roll, tril/triu, repeat."""
