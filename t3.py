import backends, asyncio, concurrent.futures as cf, pickle, multiprocessing as mp
def tr(label, f):
    try:
        r = f(); print(f"[{label}] OK -> {r!r}")
    except BaseException as e:
        print(f"[{label}] {type(e).__name__}: {e}")
c = backends.cudnn
def det(): return c.deterministic
def det_x(x): return x, c.deterministic
if __name__ == "__main__":
    # process pool with bind
    with c.flags(deterministic=True):
        b = backends.bind(det_x)
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        tr("bind spawn pool", lambda: ex.submit(b, 1).result())
        tr("plain spawn pool", lambda: ex.submit(det_x, 1).result())
        tr("map bound", lambda: list(ex.map(b, [1, 2])))
    with c.flags(deterministic=True):
        with cf.ThreadPoolExecutor(1) as ex:
            tr("thread pool unbound in scope", lambda: ex.submit(det).result())
    async def m():
        with c.flags(deterministic=True):
            r1 = await asyncio.to_thread(det)
            loop = asyncio.get_running_loop()
            r2 = await loop.run_in_executor(None, det)
            r3 = await loop.run_in_executor(None, backends.bind(det))
        return r1, r2, r3
    tr("to_thread / run_in_executor / bound", lambda: asyncio.run(m()))
    # bind repr/pickle
    tr("bind repr", lambda: repr(b))
    tr("bind pickle roundtrip", lambda: pickle.loads(pickle.dumps(b))(5))
    tr("bind of bind", lambda: backends.bind(b)(1))
    # bind kwargs?
    tr("bind with args", lambda: backends.bind(det_x, 3)())
    # snapshot dict methods
    s = backends.snapshot()
    tr("snapshot keys", lambda: list(s)[:2])
    tr("snapshot len", lambda: len(s))
    tr("snapshot to dict", lambda: dict(s) == s.to_dict() if hasattr(s, "to_dict") else dict(s))
    tr("snapshot item typo", lambda: s["cudnn.benchmak"])
    tr("snapshot in", lambda: "cudnn.deterministic" in s)
    tr("snapshot mutate", lambda: s.__setitem__("cudnn.deterministic", True))
    tr("snapshot |", lambda: s | {"cudnn.deterministic": True})
    tr("snapshot replace", lambda: s.replace(**{"cudnn.deterministic": True}) if hasattr(s, "replace") else "n/a")
    tr("snapshot from_dict numpy-ish bool via int", lambda: backends.Snapshot.from_dict({**dict(s), "cudnn.deterministic": 1}))
    tr("Snapshot() direct", lambda: backends.Snapshot(dict(s)) == s)
    tr("json", lambda: __import__("json").dumps(dict(s))[:60])
    # deterministic()
    tr("deterministic()", lambda: [(c.deterministic, backends.cuda.matmul.allow_tf32, backends.algorithms.deterministic) for _ in [backends.deterministic().__enter__()]])
