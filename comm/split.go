package comm

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Splitter is a communicator whose group can be split into subgroups, as
// MPI_Comm_split splits one: hybrid layouts (data parallelism across
// tensor-parallel groups or across pipelines) run each kind of collective
// in a group of its own.
type Splitter interface {
	// Split is a collective of the whole group. The ranks that pass the
	// same color form a new group, ranked by key and then by their rank
	// in this one; each gets its own communicator of that group. A rank
	// that passes a negative color (MPI_UNDEFINED) joins none and gets nil.
	Split(ctx context.Context, color, key int) (Comm, error)
}

// Split splits c's group as MPI_Comm_split does (see Splitter). A Meta
// communicator cannot: it does not see the other ranks' colors, so code
// that must also plan splits with SplitBy.
func Split(ctx context.Context, c Comm, color, key int) (Comm, error) {
	s, ok := c.(Splitter)
	if !ok {
		return nil, fmt.Errorf("%w: %v cannot be split by color (a meta communicator needs every rank's: SplitBy)", ErrArgument, c)
	}
	return s.Split(ctx, color, key)
}

// Layout is every rank's color and key in a split, a function of the
// rank: every rank passes the same one.
type Layout func(rank int) (color, key int)

// SplitBy splits c's group, every rank taking its color and key from
// layout. It is Split for Local and MPI; a Meta communicator, which moves
// no data, computes its group from layout alone, so that a planner runs
// the same code as the ranks.
func SplitBy(ctx context.Context, c Comm, layout Layout) (Comm, error) {
	if m, ok := c.(metaComm); ok {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return m.splitBy(layout), nil
	}
	color, key := layout(c.Rank())
	return Split(ctx, c, color, key)
}

// Grid splits c's group of size = outer×inner ranks into blocks of inner
// consecutive ranks (block: rank r is rank r%inner of block r/inner) and
// the groups across them (across: the ranks with the same r%inner, rank
// r/inner in it): a tensor- or pipeline-parallel block and the
// data-parallel group of ranks holding the same part of the model.
func Grid(ctx context.Context, c Comm, inner int) (block, across Comm, err error) {
	if inner < 1 || c.Size()%inner != 0 {
		return nil, nil, fmt.Errorf("%w: %d ranks do not split into groups of %d", ErrArgument, c.Size(), inner)
	}
	block, err = SplitBy(ctx, c, func(r int) (int, int) { return r / inner, r % inner })
	if err != nil {
		return nil, nil, err
	}
	across, err = SplitBy(ctx, c, func(r int) (int, int) { return r % inner, r / inner })
	if err != nil {
		return nil, nil, err
	}
	return block, across, nil
}

// member is a rank's place in a split: its color, key and old rank.
type member struct{ color, key, rank int }

// groups orders the members of each color as MPI_Comm_split does: by key,
// then by old rank. Negative colors join no group.
func groups(ms []member) map[int][]member {
	g := map[int][]member{}
	for _, m := range ms {
		if m.color >= 0 {
			g[m.color] = append(g[m.color], m)
		}
	}
	for _, ms := range g {
		slices.SortFunc(ms, func(a, b member) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank))
		})
	}
	return g
}

func (m metaComm) splitBy(layout Layout) Comm {
	color, _ := layout(m.rank)
	if color < 0 {
		return nil
	}
	ms := make([]member, 0, m.size)
	for r := range m.size {
		c, k := layout(r)
		if c == color {
			ms = append(ms, member{c, k, r})
		}
	}
	g := groups(ms)[color]
	i := slices.IndexFunc(g, func(x member) bool { return x.rank == m.rank })
	return metaComm{rank: i, size: len(g)}
}

// Split makes one new Local group per color, sharing this group's abort:
// a rank failing in any of them stops the ranks waiting in the others.
func (c *localComm) Split(ctx context.Context, color, key int) (Comm, error) {
	var got Comm
	err := c.collective(ctx, "split", 2, 0, nil, []float64{float64(color), float64(key)},
		func(r *round) {
			ms := make([]member, len(r.in64))
			for i, in := range r.in64 {
				ms[i] = member{int(in[0]), int(in[1]), i}
			}
			r.comms = make([]Comm, len(ms))
			for _, g := range groups(ms) {
				sub := newLocal(len(g), c.l.ab)
				for i, m := range g {
					r.comms[m.rank] = sub.comms[i]
				}
			}
		},
		func(r *round) { got = r.comms[c.rank] })
	if err != nil || got == nil {
		return nil, err
	}
	return got, nil
}
