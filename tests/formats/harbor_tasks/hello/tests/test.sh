#!/bin/sh
# Harbor's convention: the reward goes to /logs/verifier/reward.txt
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello" ]; then
  echo "greeting found"
  echo 1 > /logs/verifier/reward.txt
else
  echo "no greeting"
  echo 0 > /logs/verifier/reward.txt
fi
