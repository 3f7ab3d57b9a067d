#!/bin/sh
echo hello > /app/greeting.txt
