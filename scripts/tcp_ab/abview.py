import json, sys
d = json.load(open(sys.argv[1])); win = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
bw = d["args"]["bw"]; cap = bw * 1e6 / 8
S = d["samples"]; res = d["results"]
t0 = min(r["start"] for r in res)
print("worker ends:", [round(r["end"] - t0, 3) for r in res])
n = len(S[0][1])
i = next(k for k, s in enumerate(S) if s[0] >= t0)
print("t      up: " + " ".join(f"h{j+1:<4}" for j in range(n)) + " | down: " + " ".join(f"h{j+1:<4}" for j in range(n)))
tot_up = [0]*n
while i < len(S) - 1:
    j = i
    while j < len(S) - 1 and S[j][0] - S[i][0] < win:
        j += 1
    dt = S[j][0] - S[i][0]
    up = [(S[j][1][k] - S[i][1][k]) / cap / dt for k in range(n)]
    dn = [(S[j][2][k] - S[i][2][k]) / cap / dt for k in range(n)]
    print(f"{S[i][0]-t0:6.3f}     " + " ".join(f"{u:5.2f}" for u in up) + " |       " + " ".join(f"{u:5.2f}" for u in dn))
    i = j
