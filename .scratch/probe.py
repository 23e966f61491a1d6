import sys, time, argparse
import numpy as np, pandas as pd
from scipy import stats
sys.path.insert(0,'.')
import benchmarks.coverage_counterfactual as cc
from benchmarks.coverage_identification import simulated_case
case, size = sys.argv[1], int(sys.argv[2]); pops=[int(p) for p in sys.argv[3].split(',')]
reps, truth = int(sys.argv[4]), int(sys.argv[5])
exp = simulated_case(case, [f"population.n={size}"])
args = argparse.Namespace(reps=reps, truth_seeds=truth, screeners='direct', budgets='100%')
for p in pops:
    t=time.time()
    out = cc.population_rows(exp, case, p, args)
    a = out[(out.inference=='applicants')]
    for e in ['TE','BIE','RIE']:
        g=a[a.effect==e]
        # accurate: per-seed designs - get from truth_these_worlds over reps & sd
        z=(g.estimate-g.truth)/g.se
        cov=((g.ci_low<=g.truth)&(g.truth<=g.ci_high)).mean()
        print(f"pop {p} {e}: sdw {g.sd_over_world_seeds.iloc[0]:.3f} meanSE {g.se.mean():.3f} rmsSE {np.sqrt((g.se**2).mean()):.3f} cvSE {g.se.std()/g.se.mean():.2f} rmse {np.sqrt(((g.estimate-g.truth)**2).mean()):.3f} kurt(err) {stats.kurtosis(g.estimate-g.truth):.2f} cov {cov:.3f} corr(|err|,se) {np.corrcoef((g.estimate-g.truth).abs(), g.se)[0,1]:.2f}", flush=True)
    print(f"  {time.time()-t:.0f}s", flush=True)
