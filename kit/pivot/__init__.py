"""The diagnostic pivot: is it the host, NCCL on this topology, SGLang, or MTP?

    kit.pivot.doctor     host checks with their fixes (pure checks over facts read by kit.pivot.host)
    kit.pivot.preflight  the image's torch.distributed alone: N ranks in one container, step deadlines,
                         stacks on a hang, and the step again with NCCL_P2P_DISABLE=1 (P2P or not)
    kit.pivot.ranks      the in-image rank script (standalone; copied in at run time, never baked in)
    kit.pivot.steps      rank events -> step states and a verdict (pure)
    kit.pivot.bisect     doctor -> preflight -> base -> target, then one change at a time

Docs: docs/pivot.md; doctor's JSON Schema: docs/schema/doctor.json.
"""
