#!/bin/sh
# Several named rewards: reward.json; "reward" is the one that counts
n=0
[ -f /app/out/a.txt ] && n=$((n + 1))
[ -f /app/out/b.txt ] && n=$((n + 1))
if [ "$n" = 2 ]; then r=1; else r=0; fi
printf '{"reward": %s, "files": %s}\n' "$r" "$n" > /logs/verifier/reward.json
