#!/bin/bash
# explore --leaves grid: sizes 3-6 x seeds 1-5, first violated property (or "-")
out=$1; mkdir -p $out
for n in 3 4 5 6; do
  line="$n:"
  for s in 1 2 3 4 5; do
    log=$out/ex-$n-$s.log
    timeout 900 /work/main/.venv/bin/python -m swarmshake explore --backend sim --leaves --nodes $n --seed $s --budget 200 --out $out/runs > $log 2>&1
    prop=$(grep -oE "^explore: (S[1-5]|L[1-3]|D1):" $log | head -1 | sed 's/explore: //; s/://')
    if grep -q "internal error" $log; then prop=ERR; fi
    line="$line ${prop:--}"
  done
  echo "$line" >> $out/grid.txt
done
echo DONE >> $out/grid.txt
