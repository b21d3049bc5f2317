module github.com/cdcd-dev/cdcd

go 1.26.0
