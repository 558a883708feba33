module github.com/headroom-ml/headroom

go 1.26
