"""EAGLE-3 and EAGLE 3.1 (EAGLE-3 with the fc_norm / norm_output flags).

EAGLE-3 is the base the other drafters share: its checkpoint format lives in
checkpoint/eagle3/, its module in model/drafter.py, its chain/tree decoder in
decode/speculative.py and its training-time-test loop in train/; this package holds what the
registry's generic verbs ask of the method (its parts), on top of them.
"""
