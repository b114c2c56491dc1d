"""The processes the GPU host check's watch steps watch: REHEARSALS of start-up shapes, not SGLang.

hang.py (a rank waiting in torch's TCPStore rendezvous for a peer that never comes, or crashing out
of it) and shapes.py (a rank that spins, one that compiles Triton kernels in capture, a quiet one)
run by path on a Python with torch and import nothing of the kit beyond this folder.
"""
