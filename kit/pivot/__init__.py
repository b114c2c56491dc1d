"""The diagnostic pivot: is it the host, NCCL on this topology, SGLang, or MTP?

    kit.pivot.doctor       host checks with their fixes (pure checks over kit.runtime.host's facts)
    kit.pivot.preflight    the image's SGLang builds its TP group alone (its own environment and group
                           init): N ranks in one container, step deadlines, stacks on a hang, and the
                           step again with NCCL_P2P_DISABLE=1 (P2P or not)
    kit.pivot.preflight_container  the preflight container: files copied in, its output, its removal
    kit.pivot.inimage      the in-image rank script, ranks.py (standalone: copied in at run time with
                           kit/images/inimage/sglang_groups.py, never baked in; in a folder of its own,
                           so running it puts nothing else on sys.path)
    kit.pivot.steps        rank events -> step states and a verdict (pure)
    kit.pivot.ladder       bisect's data and its climb over injected runners (pure but for the alarm)
    kit.pivot.rungs        the rungs and the changes on them, resolved through the catalog
    kit.pivot.sglang_rules SGLang's own rules: a change SGLang already makes here is skipped (pure)
    kit.pivot.bisect       doctor -> preflight -> base -> target, then one change at a time

Docs: docs/pivot.md; doctor's JSON Schema: docs/schema/doctor.json.
"""
