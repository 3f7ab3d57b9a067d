#!/bin/sh
mkdir -p /app/out && touch /app/out/a.txt /app/out/b.txt
