"""Mixture-of-experts token movement and grouped GEMM: ``accel::moe_gather``, ``accel::moe_combine`` (with
``accel::moe_combine_backward``) and ``accel::grouped_mm`` (with ``accel::grouped_mm_backward``).

A mixture-of-experts layer sends each token to its ``top_k`` experts: the ``tokens x top_k`` (token, expert)
pairs are sorted by expert, each expert's rows run through its weights as one group of a grouped GEMM, and each
token's ``top_k`` results are summed with the router's weights. :mod:`.op` defines the three steps that surround
the GEMMs as custom ops whose backward is the other step (the gather's backward is an unweighted combine), so
autograd never scatters with atomics or sorts again (eager ``x[index]``'s backward is ``index_put_(...,
accumulate=True)``), and no ``[pairs, hidden]`` product of the rows and their weights is kept.

Their default kernels (every device) are the eager references of :mod:`.reference`; no accel Triton kernel is
registered for them yet. Importing this package defines no op (:mod:`.op` does).
"""
