"""The diagnostic pivot: is it the host, NCCL on this topology, SGLang, or MTP?

    kit.pivot.doctor     host checks with their fixes (pure checks over facts read by kit.pivot.host)
    kit.pivot.preflight  the image's torch.distributed alone: N ranks in one container, step deadlines,
                         stacks on a hang, and the step again with NCCL_P2P_DISABLE=1 (P2P or not)
    kit.pivot.inimage    the in-image rank script, ranks.py (standalone: copied in at run time, never
                         baked in; in a folder of its own, so running it puts nothing else on sys.path)
    kit.pivot.steps      rank events -> step states and a verdict (pure)
    kit.pivot.bisect     doctor -> preflight -> base -> target, then one change at a time

Docs: docs/pivot.md; doctor's JSON Schema: docs/schema/doctor.json.
"""
