"""Ray's fixed costs on this machine: import, ray.init, 200 empty tasks (the first ones
start the workers), 200 more, shutdown -- the constants of the README's Ray row.

    .venv/bin/python scripts/ray_cost.py [--cpus 2]
"""
import argparse
import time


def _empty(x):
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    import ray

    t1 = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    t2 = time.perf_counter()
    task = ray.remote(num_cpus=1, max_retries=0)(_empty)
    ray.get([task.remote(i) for i in range(200)])
    t3 = time.perf_counter()
    ray.get([task.remote(i) for i in range(200)])
    t4 = time.perf_counter()
    ray.shutdown()
    t5 = time.perf_counter()
    print(f"import {t1 - t0:.2f} s, init {t2 - t1:.2f} s, first 200 empty tasks {t3 - t2:.2f} s, "
          f"next 200 {1000 * (t4 - t3) / 200:.1f} ms/task, shutdown {t5 - t4:.2f} s")


if __name__ == "__main__":
    main()
