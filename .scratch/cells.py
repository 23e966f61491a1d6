import sys, pandas as pd, numpy as np
sys.path.insert(0,'.')
from benchmarks.coverage_counterfactual import coverage_line
d=pd.read_csv(sys.argv[1]); d=d[(d.inference=='applicants')&(d.se>0)&d.effect.isin(['TE','NIE','BIE','RIE'])].copy()
d['covered']=(d.ci_low-1e-9<=d.truth)&(d.truth<=d.ci_high+1e-9)
d['z']=(d.estimate-d.truth)/d.se
rows=[]
for (c,b,e),g in d.groupby(['case','budget','effect']):
    s,lo,hi,n=coverage_line(g,'covered')
    rows.append(dict(case=c,budget=b,effect=e,cov=f"{s:.3f} ({lo:.3f}-{hi:.3f})",n=n,pops=g.population_seed.nunique(),rmsz=np.sqrt((g.z**2).mean()), flag='' if 0.93<=s<=0.97 else 'OUT'))
print(pd.DataFrame(rows).round(3).to_string())
if len(sys.argv)>2:
    w=d.pivot_table(index=['case','population_seed','budget','seed','effect'],columns='screener',values='z')
    print(w.corr().round(3))
