"""Ray tasks and actors under the flags of the code that calls .remote(): backends.integrations.ray.

    python examples/ray_remote.py
"""

from __future__ import annotations

import backends


def main() -> None:
    try:
        import ray

        from backends.integrations import ray as backends_ray
    except ImportError:
        print("ray is not installed (pip install 'scoped-backends[ray]'): nothing to show")
        return

    @backends_ray.remote  # in place of @ray.remote: the same options, e.g. @backends_ray.remote(num_cpus=1)
    def deterministic_now(tag: str) -> tuple[str, bool]:
        return tag, backends.cudnn.deterministic

    @ray.remote
    def plain(tag: str) -> tuple[str, bool]:
        return tag, backends.cudnn.deterministic

    @backends_ray.remote
    class Model:
        def predict(self, x: float) -> tuple[float, bool]:
            return x, backends.cudnn.deterministic

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        model = Model.remote()
        with backends.cudnn.flags(deterministic=True):
            task = deterministic_now.remote("task")  # the flags are taken here, at .remote()
            call = model.predict.remote(1.5)
            lost = plain.remote("plain ray task")  # Ray alone: the worker's own defaults
        after = deterministic_now.remote("after")  # outside the scope: the defaults again
        results = ray.get([task, call, lost, after])
    finally:
        ray.shutdown()
    print(results)
    assert results == [("task", True), (1.5, True), ("plain ray task", False), ("after", False)]


if __name__ == "__main__":
    main()
