"""Benchmarks, in two rooms (bench/README.md says what each module measures):

    bench/suite/     what `python -m bench` runs: minillm side by side with its peers, in one
                     run, the tables of bench/RESULTS.md
    bench/studies/   one-off measurements that the docs cite: python -m bench.studies.NAME

    python -m bench                      # every workload, 3 repeats, 1 BLAS/torch thread
    python -m bench --quick              # tiny shapes, 1 repeat: checks that everything runs
    python -m bench --only decode --threads 2 --out bench/RESULTS.md --plots bench/plots

Contenders run interleaved (A B C A B C ...) so that a slow moment of the machine hits all of
them alike; the table gives the median of the repeats with their min-max, and how many times
faster minillm float32 is than each contender. A contender or workload that cannot run (a peer
not installed, shipped weights not there yet) is printed as "missing (reason)".
"""
