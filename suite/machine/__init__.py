"""The machine a timing was measured on: what else used its CPUs and GPUs, and how fast they ran.

A step time means little without the state of the machine it was measured on: a busy neighbour, a throttled
GPU or a CPU held at a low clock make code look slower that is not.  This package measures that state around
every timed launch (`sampler.Sampler`: a light thread in the runner, outside the workers and their timed steps,
reading /proc, sysfs and, where `nvidia-ml-py` is installed, NVML), stores it typed in each result
(`state.MachineState`), and judges it (`policy`): is the machine quiet enough to time on (`--require-quiet`), and
do two results' machines differ enough that their timings should not be compared (compare's "machine state
differs").

    state.py    the records (MachineState, Snapshot, GpuState, Competitor)
    proc.py     Linux's /proc and sysfs: load, CPU clocks, memory, every process's CPU time and parent
    nvml.py     NVIDIA devices through NVML's own bindings (optional: pip install nvidia-ml-py)
    sampler.py  the sampler: a snapshot before, samples during, a snapshot after; who competed for the CPU
    policy.py   thresholds, what makes a machine busy, when two states differ, the quiet-machine policy
"""
